-- How many enqueue keys' windows started before $1 (timestamptz).
SELECT count(*) FROM idem_enqueue_key WHERE window_start < $1
