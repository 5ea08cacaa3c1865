-- Purges batches $1 (bigint[], picked by purge/pick_batches.sql, their shards locked by
-- purge/batch_shards_lock.sql) if still finished before $2 (timestamptz), with their
-- shard counts; returns how many batches. Open and sealed batches are never purged.
-- PostgreSQL dialect: one statement with a data-modifying CTE (SQLite: two statements);
-- the state and time predicates stand on this DELETE itself.
WITH gone AS (
    DELETE FROM idem_batch
    WHERE id = ANY($1::bigint[])
      AND state = 'finished'
      AND finished_at < $2
    RETURNING id
), shards AS (
    DELETE FROM idem_batch_shard WHERE batch_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
