-- The job holding each key. $1: JSON array of {queue, key}.
SELECT k.queue, k.key, k.job_id
FROM idem_enqueue_key AS k
JOIN jsonb_to_recordset($1::jsonb) AS e(queue text, key text)
  ON k.queue = e.queue AND k.key = e.key
