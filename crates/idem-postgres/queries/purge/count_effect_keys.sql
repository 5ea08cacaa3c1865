-- How many effect dedup records were created before $1 (timestamptz).
SELECT count(*) FROM idem_effect WHERE created_at < $1
