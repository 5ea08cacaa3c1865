-- How many enqueue keys were taken before ?1 (ms).
SELECT count(*) FROM idem_enqueue_key WHERE created_at < ?1
