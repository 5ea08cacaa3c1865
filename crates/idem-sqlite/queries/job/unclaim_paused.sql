-- Gives back the claims in ?1 (JSON array of {job_id, fence}: jobs this transaction
-- inserted claimed for a local worker) whose queue is paused now: available again,
-- attempt 0, no lease; the fence stays, so a later claim takes fence + 1. Their ids.
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    lease_owner = NULL,
    attempted_at = NULL,
    lease_expires_at = NULL
WHERE state = 'running'
  AND (id, fence) IN (SELECT l.value ->> 'job_id', l.value ->> 'fence' FROM json_each(?1) AS l)
  AND EXISTS (SELECT 1 FROM idem_queue_pause AS p WHERE p.queue = idem_job.queue)
RETURNING id
