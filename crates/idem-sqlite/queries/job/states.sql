-- The state of each of jobs ?1 (JSON array of ids) that is dead or cancelled.
-- SQLite only: an operator's retry reads the states it is about to leave before its
-- update (RETURNING sees only the new row); the transaction holds the write lock, so
-- nothing changes in between. PostgreSQL reads them in job/retry.sql's locking CTE.
SELECT id, state FROM idem_job
WHERE id IN (SELECT value FROM json_each(?1)) AND state IN ('dead', 'cancelled')
