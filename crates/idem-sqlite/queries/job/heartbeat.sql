-- Extends every current lease in ?1 (JSON array of {job_id, fence}) to now + ?2 ms
-- (?3 ms, NULL = database clock). A lease that is no longer current is not returned.
UPDATE idem_job
SET lease_expires_at = coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?2
WHERE state = 'running'
  AND (id, fence) IN (SELECT l.value ->> 'job_id', l.value ->> 'fence' FROM json_each(?1) AS l)
RETURNING id, fence, lease_expires_at
