-- Operator retry: dead or cancelled jobs $1 (bigint[]) back to available at $2
-- (timestamptz, NULL = database clock) with attempt 0 and no snoozes, a fresh start. The
-- fence is kept (it only ever grows), as are the attempt history and last_error.
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    snoozes = 0,
    run_at = coalesce($2::timestamptz, now()),
    finalized_at = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND state IN ('dead', 'cancelled')
RETURNING *
