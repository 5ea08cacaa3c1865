-- Claims up to $2 claimable jobs of queue $1 in claim order, in one statement: running,
-- attempt + 1, fence + 1, leased to worker $3 for $4 ms from now ($5 timestamptz, NULL =
-- database clock).
-- PostgreSQL dialect: claims run concurrently, so the candidates are locked with
-- FOR UPDATE SKIP LOCKED (a row another claim is taking is skipped, never waited for);
-- SQLite serialises claims on its single writer instead.
WITH picked AS (
    SELECT id FROM idem_job
    WHERE queue = $1
      AND state IN ('available', 'scheduled', 'retryable')
      AND run_at <= coalesce($5::timestamptz, now())
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
RETURNING idem_job.*
