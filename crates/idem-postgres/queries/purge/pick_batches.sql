-- Up to $2 batches finished before $1 (timestamptz), oldest first: what
-- purge/batches.sql deletes once their shards are locked (purge/batch_shards_lock.sql).
-- PostgreSQL only: SQLite deletes them in one statement (its purge/batches.sql).
SELECT id FROM idem_batch
WHERE state = 'finished' AND finished_at < $1
ORDER BY finished_at
LIMIT $2
