-- 0012_batch: batches with fan-in completion, chains, and the result a job completes with.
-- idem_batch: one row per batch; its children are jobs whose batch_id names it. state:
-- `open` (children may be added), `sealed` (no more children; finishes when every child
-- is finished), `finished` (its successor was enqueued, once, in the transaction of the
-- change that finished it: successor_job_id names it, and its enqueue key is
-- `batch:{id}:done`). The successor to
-- enqueue is `successor` (a job as idem_store::NewJob serialises it); with on_dead =
-- 'failure_successor' and at least one dead child, `failure_successor` runs instead.
-- key_window_ms: the enqueue-key window the successor's key is taken with.
-- idem_batch_shard: a batch's counts, split over shards (a child's shard is its job id
-- modulo idem_store::batch::SHARDS): total children, and those completed, dead and
-- cancelled, moved in the transaction that moves the child. A child's transaction locks
-- only its shard's row to its commit, so children of one batch finish in parallel; the
-- child that completes a shard then locks the batch row and reads every shard afresh, and
-- the one that finds them all complete (the batch sealed) enqueues the successor.
-- idem_batch_counted: a batch with its counts summed over its shards, as reads return it.
-- idem_job.follows_job_id: the job whose effect transaction enqueued this one (a chain);
-- follows_batch_id: the batch this job is the successor of; result: what the job
-- completed with (a batch's successor reads its children's).
-- PostgreSQL dialect: adding nullable columns without a default rewrites no rows, and the
-- partial index over batch children is empty on an existing table.
CREATE TABLE idem_batch (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    state             text        NOT NULL CHECK (state IN ('open', 'sealed', 'finished')),
    on_dead           text        NOT NULL CHECK (on_dead IN ('summary', 'failure_successor')),
    successor         jsonb       NOT NULL,
    failure_successor jsonb,
    key_window_ms     bigint      NOT NULL CHECK (key_window_ms > 0),
    successor_job_id  bigint,
    principal         text        CHECK (principal IS NULL OR length(principal) BETWEEN 1 AND 128),
    created_at        timestamptz NOT NULL,
    sealed_at         timestamptz,
    finished_at       timestamptz,
    CHECK (on_dead = 'summary' OR failure_successor IS NOT NULL),
    CHECK ((state = 'finished') = (successor_job_id IS NOT NULL))
) WITH (fillfactor = 80);

CREATE TABLE idem_batch_shard (
    batch_id  bigint  NOT NULL,
    shard     integer NOT NULL,
    total     bigint  NOT NULL DEFAULT 0 CHECK (total >= 0),
    completed bigint  NOT NULL DEFAULT 0 CHECK (completed >= 0),
    dead      bigint  NOT NULL DEFAULT 0 CHECK (dead >= 0),
    cancelled bigint  NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    PRIMARY KEY (batch_id, shard)
) WITH (fillfactor = 80);

-- A batch with its counts summed over its shards: what every read of a batch returns.
CREATE VIEW idem_batch_counted AS
SELECT b.*,
       coalesce(s.total, 0)::bigint AS total,
       coalesce(s.completed, 0)::bigint AS completed,
       coalesce(s.dead, 0)::bigint AS dead,
       coalesce(s.cancelled, 0)::bigint AS cancelled
FROM idem_batch AS b
LEFT JOIN LATERAL (
    SELECT sum(total) AS total, sum(completed) AS completed, sum(dead) AS dead,
           sum(cancelled) AS cancelled
    FROM idem_batch_shard WHERE batch_id = b.id
) AS s ON true;

CREATE INDEX idem_batch_finished ON idem_batch (finished_at) WHERE finished_at IS NOT NULL;

ALTER TABLE idem_job ADD COLUMN follows_job_id bigint;
ALTER TABLE idem_job ADD COLUMN follows_batch_id bigint;
ALTER TABLE idem_job ADD COLUMN result jsonb;

-- A batch's children in id order (status counts by state, the successor's paged read).
CREATE INDEX idem_job_batch ON idem_job (batch_id, id) WHERE batch_id IS NOT NULL;
