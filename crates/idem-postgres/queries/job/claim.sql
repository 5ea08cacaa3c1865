-- Claims up to $2 claimable jobs of queue $1 in claim order, in one statement: running,
-- attempt + 1, fence + 1, leased to worker $3 for $4 ms from now ($5 timestamptz, NULL =
-- database clock). Only jobs of the kinds in $6 (text[]; NULL = any kind): a worker
-- claims only what it has handlers for, so a job of a kind no worker knows waits and
-- spends no attempt. Only jobs enqueued by principal $7 (NULL = any job, at the cost of
-- one test of a bound parameter per candidate). Nothing while queue $1 is paused (a row
-- in idem_queue_pause; enqueues into it go on): the test depends on no candidate, so it
-- runs once per statement, and a pause that commits while a claim runs applies from the
-- next claim (the pause is ordered after that claim, as if it came a moment later).
-- PostgreSQL dialect: claims run concurrently, so the candidates are locked with
-- FOR UPDATE SKIP LOCKED (a row another claim is taking is skipped, never waited for;
-- a row locked here was re-checked against the subquery's WHERE on its latest
-- version); SQLite serialises claims on its single writer instead. The state predicate
-- stands on the outer UPDATE as well, by the rule that the predicates deciding a write
-- stand on the outer statement; queue, kind and principal need not, since no statement
-- changes them.
WITH picked AS (
    SELECT id FROM idem_job
    WHERE queue = $1
      AND state IN ('available', 'scheduled', 'retryable')
      AND run_at <= coalesce($5::timestamptz, now())
      AND ($6::text[] IS NULL OR kind = ANY($6::text[]))
      AND ($7::text IS NULL OR principal = $7::text)
      AND NOT EXISTS (SELECT 1 FROM idem_queue_pause WHERE queue = $1)
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE idem_job
SET state = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = $3,
    attempted_at = coalesce($5::timestamptz, now()),
    lease_expires_at = coalesce($5::timestamptz, now()) + $4::bigint * interval '1 millisecond'
FROM picked
WHERE idem_job.id = picked.id
  AND idem_job.state IN ('available', 'scheduled', 'retryable')
RETURNING idem_job.*
