-- How many effect dedup records were created before ?1 (ms).
SELECT count(*) FROM idem_effect WHERE created_at < ?1
