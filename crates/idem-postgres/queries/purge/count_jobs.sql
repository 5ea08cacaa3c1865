-- How many jobs in states $2 (text[]) were finalized before $1 (timestamptz).
-- A job whose intent is in progress, unknown or manual is kept, as is one awaiting such
-- an intent (see jobs.sql).
SELECT count(*) FROM idem_job AS j
WHERE j.finalized_at < $1 AND j.state = ANY($2::text[])
  AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                  WHERE i.job_id = j.id AND i.state IN ('in_progress', 'unknown', 'manual'))
  AND NOT EXISTS (SELECT 1 FROM idem_intent AS i
                  WHERE i.key = j.awaits_intent
                    AND i.state IN ('in_progress', 'unknown', 'manual'))
