-- The effect keys of kind $2 that job $1 recorded other than $3: the keys its earlier
-- attempts committed. A retry that builds a different key for the same kind is unstable
-- (a key built from an attempt number, a fence or a timestamp), and may repeat an effect.
SELECT key FROM idem_effect WHERE job_id = $1 AND kind = $2 AND key <> $3 ORDER BY created_at LIMIT 10
