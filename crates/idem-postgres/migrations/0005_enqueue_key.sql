-- 0005_enqueue_key: enqueue deduplication, and snoozed attempts in the history.
-- A (queue, key) is held by the job that took it; a key taken before the window is free
-- again and the next enqueue with it takes it over (see queries/enqueue_key/take.sql).
-- Purged by created_at range once older than the window.
CREATE TABLE idem_enqueue_key (
    queue      text        NOT NULL,
    key        text        NOT NULL CHECK (char_length(key) BETWEEN 1 AND 255),
    job_id     bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

CREATE INDEX idem_enqueue_key_created ON idem_enqueue_key (created_at);
CREATE INDEX idem_enqueue_key_job ON idem_enqueue_key (job_id);

-- A handler may snooze: run later without spending an attempt. PostgreSQL dialect: the
-- CHECK constraint is replaced in place (SQLite rebuilds the table).
ALTER TABLE idem_job_attempt DROP CONSTRAINT idem_job_attempt_outcome_check;
ALTER TABLE idem_job_attempt ADD CONSTRAINT idem_job_attempt_outcome_check
    CHECK (outcome IN ('completed', 'retryable', 'dead', 'lease_expired', 'cancelled',
                       'snoozed'));

-- Purging dead jobs and finished jobs by range reads the finalized index; attempts are
-- deleted with their job by job_id, the attempt table's leading key column.
