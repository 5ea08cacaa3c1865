-- Operator discard: deletes the dead jobs among ?1 (JSON array of ids); returns the ids
-- deleted. SQLite dialect: their attempts and enqueue keys are deleted by two more
-- statements (job_attempt/delete.sql, enqueue_key/delete.sql); PostgreSQL does all three in
-- one.
DELETE FROM idem_job WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'dead'
RETURNING id
