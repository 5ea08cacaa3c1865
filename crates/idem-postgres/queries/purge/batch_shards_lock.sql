-- The batches purge/batches.sql is about to delete, $1 (bigint[]): their shard rows locked
-- first, in (batch, shard) order, the order in which every count takes shards before the
-- batch row, so a purge and the completion of a child reopened by an operator's retry
-- never wait on each other in a cycle.
-- PostgreSQL only: SQLite's single writer orders every transaction.
SELECT 1 FROM idem_batch_shard
WHERE batch_id = ANY($1::bigint[])
ORDER BY batch_id, shard
FOR UPDATE
