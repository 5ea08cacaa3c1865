-- How many enqueue keys purge/enqueue_keys.sql would delete with cutoff $1
-- (timestamptz): windows started before it, and no job that may still run.
SELECT count(*) FROM idem_enqueue_key AS k
WHERE k.window_start < $1
  AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                  WHERE h.id = k.job_id
                    AND h.state IN ('scheduled', 'available', 'running', 'retryable'))
