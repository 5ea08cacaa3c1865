-- Claims up to ?2 claimable jobs of queue ?1 in claim order, in one statement: running,
-- attempt + 1, fence + 1, leased to worker ?3 for ?4 ms from now (?5 ms, NULL = database
-- clock). Only jobs of the kinds in ?6 (JSON array; NULL = any kind): a worker claims
-- only what it has handlers for, so a job of a kind no worker knows waits and spends no
-- attempt. Only jobs enqueued by principal ?7 (NULL = any job, at the cost of one test
-- of a bound parameter per candidate). Nothing while queue ?1 is paused (a row in
-- idem_queue_pause; enqueues into it go on).
-- SQLite dialect: the single writer (BEGIN IMMEDIATE) serialises claims, so no SKIP LOCKED;
-- the outer state predicate mirrors PostgreSQL's. The states are compared one by one, as
-- in the claim index's predicate (migration 0015), which the inner WHERE must imply.
UPDATE idem_job
SET state = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = ?3,
    attempted_at = coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_expires_at = coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?4
WHERE id IN (
    SELECT id FROM idem_job
    WHERE queue = ?1
      AND (state = 'available' OR state = 'scheduled' OR state = 'retryable')
      AND run_at <= coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
      AND (?6 IS NULL OR kind IN (SELECT value FROM json_each(?6)))
      AND (?7 IS NULL OR principal = ?7)
      AND NOT EXISTS (SELECT 1 FROM idem_queue_pause WHERE queue = ?1)
    ORDER BY priority, run_at, id
    LIMIT ?2
)
  AND (state = 'available' OR state = 'scheduled' OR state = 'retryable')
RETURNING *
