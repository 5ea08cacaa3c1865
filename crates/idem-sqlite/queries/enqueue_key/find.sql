-- The job holding each key. ?1: JSON array of {queue, key}.
SELECT k.queue, k.key, k.job_id
FROM idem_enqueue_key AS k
JOIN json_each(?1) AS e
  ON k.queue = e.value ->> 'queue' AND k.key = e.value ->> 'key'
