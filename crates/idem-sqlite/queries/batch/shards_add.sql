-- Adds to the totals of batch ?1's shards: ?2 a JSON array of {shard, total} (how many
-- children each gains); a shard's row is created with its first child.
-- SQLite dialect: the list arrives as JSON text (`WHERE true` lets the upsert parse after
-- a SELECT).
INSERT INTO idem_batch_shard (batch_id, shard, total)
SELECT ?1, t.value ->> 'shard', t.value ->> 'total'
FROM json_each(?2) AS t
WHERE true
ON CONFLICT (batch_id, shard) DO UPDATE SET total = total + excluded.total
