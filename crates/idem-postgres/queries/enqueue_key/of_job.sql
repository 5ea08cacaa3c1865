-- The enqueue key job $1 holds in its queue, if any (a job holds at most one: it has
-- one queue, and a key names one job).
SELECT key FROM idem_enqueue_key WHERE job_id = $1
