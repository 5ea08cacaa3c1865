-- Purges up to $2 effect dedup records created before $1 (timestamptz), oldest first,
-- except those of a job that may still run again: a key is kept while the job that
-- recorded it exists in any state but completed (running, waiting to retry, snoozed,
-- dead or cancelled, which an operator may retry), so a late attempt of that job always
-- finds the key its earlier attempt committed, however long it waited. Completed is
-- final, and a job that is gone (purged, discarded) runs no more.
-- The predicates stand on the outer DELETE as well as in the subquery. A job's state
-- is read by the statement's snapshot; a job that completes after it keeps its keys
-- until the next purge, which is the safe side.
WITH gone AS (
    DELETE FROM idem_effect AS e
    WHERE e.key IN (SELECT o.key FROM idem_effect AS o
                    WHERE o.created_at < $1
                      AND NOT EXISTS (SELECT 1 FROM idem_job AS j
                                      WHERE j.id = o.job_id AND j.state <> 'completed')
                    ORDER BY o.created_at LIMIT $2)
      AND e.created_at < $1
      AND NOT EXISTS (SELECT 1 FROM idem_job AS j
                      WHERE j.id = e.job_id AND j.state <> 'completed')
    RETURNING 1
)
SELECT count(*) FROM gone
