-- How many jobs in states ?2 (JSON array of names) were finalized before ?1 (ms).
SELECT count(*) FROM idem_job
WHERE finalized_at < ?1 AND state IN (SELECT value FROM json_each(?2))
