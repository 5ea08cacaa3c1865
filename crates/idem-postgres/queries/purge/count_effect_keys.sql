-- How many effect dedup records created before $1 (timestamptz) a purge would delete:
-- those of a job that may still run again (it exists and is not completed) are kept.
SELECT count(*) FROM idem_effect AS e
WHERE e.created_at < $1
  AND NOT EXISTS (SELECT 1 FROM idem_job AS j WHERE j.id = e.job_id AND j.state <> 'completed')
