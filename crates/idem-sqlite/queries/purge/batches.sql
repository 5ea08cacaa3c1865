-- Purges up to ?2 batches finished before ?1 (ms), oldest first; returns their ids (the
-- store deletes their shard counts next, purge/batch_shards.sql). Open and sealed
-- batches are never purged.
DELETE FROM idem_batch
WHERE id IN (SELECT id FROM idem_batch
             WHERE state = 'finished' AND finished_at < ?1
             ORDER BY finished_at
             LIMIT ?2)
RETURNING id
