-- Adds to the totals of batch $1's shards: $2 the shards (int4[]), $3 how many children
-- each gains (int8[]); a shard's row is created with its first child. The rows are
-- written in shard order, the order in which every statement locks them.
INSERT INTO idem_batch_shard (batch_id, shard, total)
SELECT $1, t.shard, t.n
FROM unnest($2::int4[], $3::int8[]) AS t(shard, n)
ORDER BY t.shard
ON CONFLICT (batch_id, shard) DO UPDATE SET total = idem_batch_shard.total + EXCLUDED.total
