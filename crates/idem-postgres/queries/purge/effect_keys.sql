-- Purges up to $2 effect dedup records created before $1 (timestamptz), oldest first,
-- except those of a job that may still run again: a key is kept while the job that
-- recorded it exists in any state but completed (running, waiting to retry, snoozed,
-- dead or cancelled, which an operator may retry), so a late attempt of that job always
-- finds the key its earlier attempt committed, however long it waited. Completed is
-- final, and a job that is gone (purged, discarded) runs no more.
-- The predicates stand on the outer DELETE as well as in the subquery that picks the
-- oldest. A job's state is read by the statement's snapshot; a job that completes after
-- it keeps its keys until the next purge, which is the safe side.
-- PostgreSQL dialect: the picked keys come as an array (an InitPlan evaluated once), so
-- the delete reaches each by the primary key; with `key IN (subquery)` and the outer age
-- predicate the planner chose to scan every record older than the cutoff on every batch.
-- The job's state is a scalar subquery, one primary-key lookup per record, which the
-- planner cannot turn into a scan of the job table; "not in every other state" says
-- "completed or gone" in a form whose selectivity the planner estimates sanely (with
-- `= 'completed'` it estimated so few rows that it JIT-compiled every purge).
WITH gone AS (
    DELETE FROM idem_effect AS e
    WHERE e.key = ANY(ARRAY(
            SELECT o.key FROM idem_effect AS o
            WHERE o.created_at < $1
              AND coalesce((SELECT j.state FROM idem_job AS j WHERE j.id = o.job_id),
                           'completed') NOT IN ('scheduled', 'available', 'running',
                                                'retryable', 'dead', 'cancelled')
            ORDER BY o.created_at
            LIMIT $2))
      AND e.created_at < $1
      AND coalesce((SELECT j.state FROM idem_job AS j WHERE j.id = e.job_id),
                   'completed') NOT IN ('scheduled', 'available', 'running', 'retryable',
                                        'dead', 'cancelled')
    RETURNING 1
)
SELECT count(*) FROM gone
