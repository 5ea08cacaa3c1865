-- Batch ?1's shards, in shard order.
-- SQLite dialect: the transaction already holds the database's write lock, so reading is
-- enough; PostgreSQL locks the shard rows here.
SELECT shard FROM idem_batch_shard WHERE batch_id = ?1 ORDER BY shard
