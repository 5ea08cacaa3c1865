-- Locks batch $1's row to the end of the transaction; with $2 true, only if it is open.
-- No row: the batch is missing (or not open).
-- PostgreSQL dialect: FOR NO KEY UPDATE conflicts with itself and with the batch's
-- updates (seal, finish), so the shard's completer that reads the shards next (a
-- statement of its own, with a snapshot taken after this lock was granted) sees every
-- change committed by the transactions that held the row before it; a statement that
-- waited here re-checks `state` on the version it then sees.
SELECT id FROM idem_batch
WHERE id = $1 AND (NOT $2 OR state = 'open')
FOR NO KEY UPDATE
