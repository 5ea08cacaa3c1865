-- How many enqueue keys' windows started before ?1 (ms).
SELECT count(*) FROM idem_enqueue_key WHERE window_start < ?1
