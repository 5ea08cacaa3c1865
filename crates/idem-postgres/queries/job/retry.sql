-- Operator retry: dead or cancelled jobs $1 (bigint[]) back to available at $2
-- (timestamptz, NULL = database clock) with attempt 0 and no snoozes, a fresh start.
-- The fence is kept (it only ever grows), as are the attempt history, last_error and the
-- intent it last awaited (awaited_intent: the intent purge keeps its outcome for the
-- job); it no longer awaits one (awaits_intent). Each row changed comes back with the
-- state it left (`was`), which its batch's counts give back.
-- PostgreSQL dialect: RETURNING sees only the new row, so the old state is read by the
-- CTE that locks the rows (in id order); the state predicate stands on the outer UPDATE
-- too, and a row locked then is not changed by anyone else before the UPDATE.
WITH prior AS (
    SELECT id, state FROM idem_job
    WHERE id = ANY($1::bigint[]) AND state IN ('dead', 'cancelled')
    ORDER BY id
    FOR NO KEY UPDATE
)
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    snoozes = 0,
    run_at = coalesce($2::timestamptz, now()),
    finalized_at = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL,
    awaits_intent = NULL
FROM prior
WHERE idem_job.id = prior.id AND idem_job.state IN ('dead', 'cancelled')
RETURNING idem_job.*, prior.state AS was
