-- Operator retry: dead or cancelled jobs ?1 (JSON array of ids) back to available at ?2
-- (ms, NULL = database clock) with attempt 0 and no snoozes, a fresh start. The fence
-- is kept (it only ever grows), as are the attempt history, last_error and the intent it
-- last awaited (awaited_intent: the intent purge keeps its outcome for the job); it no
-- longer awaits one (awaits_intent).
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    snoozes = 0,
    run_at = coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    finalized_at = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL,
    awaits_intent = NULL
WHERE id IN (SELECT value FROM json_each(?1)) AND state IN ('dead', 'cancelled')
RETURNING *
