-- Purges up to $2 batches finished before $1 (timestamptz), oldest first, with their
-- shard counts; returns how many batches. Open and sealed batches are never purged.
-- PostgreSQL dialect: one statement with a data-modifying CTE (SQLite: two statements).
-- The state and time predicates stand on the outer DELETE too; the picked ids come as an
-- array (an InitPlan evaluated once), as in jobs.sql.
WITH gone AS (
    DELETE FROM idem_batch
    WHERE id = ANY(ARRAY(SELECT b.id FROM idem_batch AS b
                         WHERE b.state = 'finished' AND b.finished_at < $1
                         ORDER BY b.finished_at
                         LIMIT $2))
      AND state = 'finished'
      AND finished_at < $1
    RETURNING id
), shards AS (
    DELETE FROM idem_batch_shard WHERE batch_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
