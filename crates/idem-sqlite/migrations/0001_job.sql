-- 0001_job: the job table and its attempt history.
-- SQLite dialect: timestamps are INTEGER milliseconds since the Unix epoch (UTC), JSON is
-- TEXT checked with json_valid, ids are AUTOINCREMENT so a deleted id is never reused.

CREATE TABLE idem_job (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL CHECK (length(kind) BETWEEN 1 AND 255),
    queue            TEXT    NOT NULL CHECK (length(queue) BETWEEN 1 AND 255),
    args             TEXT    NOT NULL CHECK (json_valid(args)),
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL CHECK (state IN ('scheduled', 'available', 'running',
                                 'retryable', 'completed', 'dead', 'cancelled')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    run_at           INTEGER NOT NULL,
    fence            INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    batch_id         INTEGER,
    created_at       INTEGER NOT NULL,
    attempted_at     INTEGER,
    finalized_at     INTEGER,
    last_error       TEXT
);

-- Claim order, only over claimable rows.
CREATE INDEX idem_job_claim ON idem_job (queue, priority, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');

-- The rescuer's scan for expired leases.
CREATE INDEX idem_job_lease ON idem_job (lease_expires_at) WHERE state = 'running';

-- Listing the states an operator looks for among millions of finished jobs. Partial, so
-- the hot transitions (available → running → completed) never touch it; listings of other
-- states use the claim index (available, scheduled, retryable), the lease index
-- (running) or the primary key (completed, most rows).
CREATE INDEX idem_job_state ON idem_job (state, id) WHERE state IN ('dead', 'cancelled');

-- Purging finished jobs by range.
CREATE INDEX idem_job_finalized ON idem_job (finalized_at) WHERE finalized_at IS NOT NULL;

-- One row per finished attempt; a claim (job, fence) finishes at most once.
CREATE TABLE idem_job_attempt (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    fence       INTEGER NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('completed', 'retryable', 'dead',
                            'lease_expired', 'cancelled')),
    error       TEXT,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, fence)
);
