-- Raises counter ?1 by one if claim (job ?2, fence ?3) is current; returns the new value.
-- SQLite dialect: SQLite has no data-modifying CTE, so the raise and the assignment
-- (counter/assign.sql) are two statements where PostgreSQL's counter/assign.sql is one.
UPDATE idem_counter SET value = value + 1
WHERE name = ?1
  AND EXISTS (SELECT 1 FROM idem_job WHERE id = ?2 AND fence = ?3 AND state = 'running')
RETURNING value
