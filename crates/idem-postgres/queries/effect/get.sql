-- The record of effect key $1 (read only after effect/claim.sql inserted nothing).
SELECT key, job_id, fence, created_at FROM idem_effect WHERE key = $1
