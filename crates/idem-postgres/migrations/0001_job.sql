-- 0001_job: the job table and its attempt history.
-- PostgreSQL dialect: timestamps are timestamptz (SQLite: INTEGER milliseconds), args is
-- jsonb (SQLite: TEXT checked with json_valid), ids are an identity column that is never
-- reused (SQLite: AUTOINCREMENT), integer widths match the seam's records (priority
-- smallint, attempt integer, ids and fences bigint). idem_job is updated in place on
-- every claim, heartbeat and finish, so it keeps 20% of each page free (fillfactor 80)
-- for HOT updates, which limits bloat (DESIGN section 9).

CREATE TABLE idem_job (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL CHECK (char_length(kind) BETWEEN 1 AND 255),
    queue            text        NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 255),
    args             jsonb       NOT NULL,
    priority         smallint    NOT NULL DEFAULT 0,
    state            text        NOT NULL CHECK (state IN ('scheduled', 'available', 'running',
                                     'retryable', 'completed', 'dead', 'cancelled')),
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    run_at           timestamptz NOT NULL,
    fence            bigint      NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    batch_id         bigint,
    created_at       timestamptz NOT NULL,
    attempted_at     timestamptz,
    finalized_at     timestamptz,
    last_error       text
) WITH (fillfactor = 80);

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
    job_id      bigint      NOT NULL,
    attempt     integer     NOT NULL,
    fence       bigint      NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('completed', 'retryable', 'dead',
                                'lease_expired', 'cancelled')),
    error       text,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, fence)
);
