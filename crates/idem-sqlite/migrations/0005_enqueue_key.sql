-- 0005_enqueue_key: enqueue deduplication, and snoozed attempts in the history.
-- A (queue, key) is held by the job that took it; a key taken before the window is free
-- again and the next enqueue with it takes it over (see queries/enqueue_key/take.sql).
-- Purged by created_at range once older than the window.
CREATE TABLE idem_enqueue_key (
    queue      TEXT    NOT NULL,
    key        TEXT    NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    job_id     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
);

CREATE INDEX idem_enqueue_key_created ON idem_enqueue_key (created_at);
CREATE INDEX idem_enqueue_key_job ON idem_enqueue_key (job_id);

-- A handler may snooze: run later without spending an attempt. SQLite dialect: a CHECK
-- constraint cannot be altered, so the attempt table is rebuilt with the new one.
CREATE TABLE idem_job_attempt_new (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    fence       INTEGER NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('completed', 'retryable', 'dead',
                            'lease_expired', 'cancelled', 'snoozed')),
    error       TEXT,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, fence)
);
INSERT INTO idem_job_attempt_new SELECT * FROM idem_job_attempt;
DROP TABLE idem_job_attempt;
ALTER TABLE idem_job_attempt_new RENAME TO idem_job_attempt;
