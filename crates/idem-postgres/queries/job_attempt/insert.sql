-- Records the finished attempt of job $1's current claim with outcome $2 and error $3,
-- finished at $4 (timestamptz, NULL = database clock). Inserts nothing unless the job's
-- state is $5 (NULL = any), so a cancel records an attempt only for a running job.
-- A snoozed claim gave its attempt back (attempt - 1 on the job row), so its number is the
-- row's attempt + 1.
-- PostgreSQL dialect: the job row is locked first, whatever its state (a MATERIALIZED CTE,
-- so the state filter cannot be pushed below the lock), and the filter then reads the
-- latest committed row. So a cancel, which opens with this statement, waits for a
-- concurrent claim, completion or failure and sees its outcome instead of racing it (SQLite
-- serialises them on its single writer). When this transaction already updated the row,
-- the lock is already held. Optional parameters are cast because `$n IS NULL` alone gives
-- PostgreSQL no type to infer.
WITH j AS MATERIALIZED (
    SELECT * FROM idem_job WHERE id = $1 FOR UPDATE
)
INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at, finished_at)
SELECT j.id, j.attempt + CASE WHEN $2 = 'snoozed' THEN 1 ELSE 0 END, j.fence, $2, $3::text, j.attempted_at,
       coalesce($4::timestamptz, now())
FROM j
WHERE $5::text IS NULL OR j.state = $5::text
