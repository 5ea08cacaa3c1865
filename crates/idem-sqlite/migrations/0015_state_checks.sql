-- 0015_state_checks: the job table's state CHECK, the attempt table's outcome CHECK and the
-- claim index's predicate, written as comparisons joined by OR instead of IN lists; the
-- rows and what the tests accept are unchanged.
-- SQLite dialect: SQLite builds a temporary b-tree for an IN list of three or more
-- constants each time a statement evaluates it, so every insert, claim and completion
-- paid for one; comparisons cost a few instructions (docs/performance.md, "Comparisons
-- instead of IN lists"). A CHECK cannot be altered, so both tables are rebuilt, and the
-- job table's AUTOINCREMENT high-water mark is carried over: a purged id is never reused.
-- The claim index's predicate must still be implied by the claim's WHERE, which spells
-- it the same way (queries/job/claim.sql).

CREATE TABLE idem_job_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL CHECK (length(kind) BETWEEN 1 AND 255),
    queue            TEXT    NOT NULL CHECK (length(queue) BETWEEN 1 AND 255),
    args             TEXT    NOT NULL CHECK (json_valid(args)),
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL CHECK (state = 'scheduled' OR state = 'available'
                                 OR state = 'running' OR state = 'retryable'
                                 OR state = 'completed' OR state = 'dead'
                                 OR state = 'cancelled'),
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
    last_error       TEXT,
    snoozes          INTEGER NOT NULL DEFAULT 0,
    enqueue_key      TEXT,
    principal        TEXT    CHECK (principal IS NULL OR length(principal) BETWEEN 1 AND 128),
    follows_job_id   INTEGER,
    follows_batch_id INTEGER,
    result           TEXT    CHECK (result IS NULL OR json_valid(result)),
    trace_parent     TEXT
);
INSERT INTO idem_job_new (id, kind, queue, args, priority, state, attempt, max_attempts,
                          run_at, fence, lease_owner, lease_expires_at, batch_id,
                          created_at, attempted_at, finalized_at, last_error, snoozes,
                          enqueue_key, principal, follows_job_id, follows_batch_id, result,
                          trace_parent)
SELECT id, kind, queue, args, priority, state, attempt, max_attempts, run_at, fence,
       lease_owner, lease_expires_at, batch_id, created_at, attempted_at, finalized_at,
       last_error, snoozes, enqueue_key, principal, follows_job_id, follows_batch_id,
       result, trace_parent
FROM idem_job
ORDER BY id;
DELETE FROM sqlite_sequence WHERE name = 'idem_job_new';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'idem_job_new', seq FROM sqlite_sequence WHERE name = 'idem_job';
DROP TABLE idem_job;
ALTER TABLE idem_job_new RENAME TO idem_job;

CREATE INDEX idem_job_claim ON idem_job (queue, priority, run_at, id)
    WHERE (state = 'available' OR state = 'scheduled' OR state = 'retryable');
CREATE INDEX idem_job_lease ON idem_job (lease_expires_at) WHERE state = 'running';
CREATE INDEX idem_job_state ON idem_job (state, id) WHERE state IN ('dead', 'cancelled');
CREATE INDEX idem_job_finalized ON idem_job (finalized_at) WHERE finalized_at IS NOT NULL;
CREATE INDEX idem_job_batch ON idem_job (batch_id, id) WHERE batch_id IS NOT NULL;

CREATE TABLE idem_job_attempt_new (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    fence       INTEGER NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome = 'completed' OR outcome = 'retryable'
                            OR outcome = 'dead' OR outcome = 'lease_expired'
                            OR outcome = 'cancelled' OR outcome = 'snoozed'),
    error       TEXT,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, fence)
);
INSERT INTO idem_job_attempt_new (job_id, attempt, fence, outcome, error, started_at,
                                  finished_at)
SELECT job_id, attempt, fence, outcome, error, started_at, finished_at
FROM idem_job_attempt;
DROP TABLE idem_job_attempt;
ALTER TABLE idem_job_attempt_new RENAME TO idem_job_attempt;
