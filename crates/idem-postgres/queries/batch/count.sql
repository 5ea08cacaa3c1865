-- Moves the counts of batch $1's shards $2 (int4[]) by $3 completed, $4 dead and $5
-- cancelled children (int8[] each; negative for an operator's retry of a finished
-- child), in the transaction that moved the children. Returns each shard changed with
-- whether it is complete now (every child of it finished). A shard with no row (its batch
-- was purged) is left alone.
-- PostgreSQL dialect: the shards are locked first, in shard order, as batch/shards_add.sql
-- writes them, so two transactions never wait on each other's shards in a cycle; the sums
-- are computed on the locked rows, and the locks are held to the end of the child's
-- transaction, which runs this last: only children of the same shard queue on each other.
WITH locked AS (
    SELECT s.shard
    FROM idem_batch_shard AS s
    WHERE s.batch_id = $1 AND s.shard = ANY($2::int4[])
    ORDER BY s.shard
    FOR NO KEY UPDATE
)
UPDATE idem_batch_shard AS s
SET completed = s.completed + d.completed,
    dead = s.dead + d.dead,
    cancelled = s.cancelled + d.cancelled
FROM locked,
     unnest($2::int4[], $3::int8[], $4::int8[], $5::int8[]) AS d(shard, completed, dead, cancelled)
WHERE s.batch_id = $1 AND s.shard = locked.shard AND d.shard = locked.shard
RETURNING s.shard, s.completed + s.dead + s.cancelled = s.total AS complete
