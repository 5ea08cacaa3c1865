-- Completes job $1 if claim fence $2 is current and keeps its result $4 (jsonb, NULL =
-- none); $3 timestamptz, NULL = database clock. $5 false leaves a child of a batch alone (the store's one-statement path, whose
-- caller completes it again in a transaction that counts its batch). No row: the claim is
-- not current (or $5 left a batch's child alone) and nothing was written.
-- The completed attempt is the job's row itself (attempt, fence, attempted_at,
-- finalized_at): no attempt row is written for it, and job_attempt/list.sql reads it from
-- the job.
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce($3::timestamptz, now()),
    lease_expires_at = NULL,
    result = $4::jsonb
WHERE id = $1 AND fence = $2 AND state = 'running' AND ($5 OR batch_id IS NULL)
RETURNING *
