-- Records, in one statement, the completed attempt of every job in ?1 (JSON array of ids)
-- that job/complete_many.sql has just completed in this transaction.
-- SQLite dialect: PostgreSQL writes these rows inside job/complete_many.sql itself (a
-- data-modifying CTE), so this file has no PostgreSQL twin.
INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at, finished_at)
SELECT id, attempt, fence, 'completed', NULL, attempted_at, finalized_at
FROM idem_job
WHERE id IN (SELECT value FROM json_each(?1))
