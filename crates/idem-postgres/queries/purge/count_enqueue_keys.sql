-- How many enqueue keys were taken before $1 (timestamptz).
SELECT count(*) FROM idem_enqueue_key WHERE created_at < $1
