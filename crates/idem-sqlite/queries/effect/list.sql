-- The effect keys job ?1 recorded (any attempt), oldest first, at most ?2 (idem_effect_job).
SELECT key, job_id, fence, created_at FROM idem_effect
WHERE job_id = ?1
ORDER BY created_at, key
LIMIT ?2
