-- How many jobs in states $2 (text[]) were finalized before $1 (timestamptz).
SELECT count(*) FROM idem_job WHERE finalized_at < $1 AND state = ANY($2::text[])
