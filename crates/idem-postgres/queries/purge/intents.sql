-- Purges up to $2 completed, failed or released intents created and last changed before
-- $1 (timestamptz), oldest first, except those of a job that may still run again (it
-- exists and is not completed), which must find its intent's stored outcome instead of
-- calling again; so are those a job that may still run awaited (`awaited_intent`: a
-- second job of the same logical request, put back when the intent was settled). Intents
-- in progress, unknown, duplicate or manual are never purged here: they await their
-- holder, a reconciler or an operator.
-- The predicates stand on the outer DELETE as well as in the subquery that picks the
-- oldest, so an intent resolved meanwhile (completed → duplicate by the audit) is kept.
-- The job's state is read from the statement's snapshot, which a delete that waited for
-- the row does not refresh: a job that took the intent over meanwhile (and may run
-- again) would look gone. `updated_at < $1` is what keeps that intent: every write to an
-- intent moves `updated_at` to its now, and the outer predicate is re-checked on the
-- newest version of the row.
-- PostgreSQL dialect: the picked keys come as an array evaluated once (see
-- effect_keys.sql for why).
WITH gone AS (
    DELETE FROM idem_intent AS i
    WHERE i.key = ANY(ARRAY(
            SELECT o.key FROM idem_intent AS o
            WHERE o.created_at < $1
              AND o.updated_at < $1
              AND o.state IN ('completed', 'failed', 'released')
              AND coalesce((SELECT j.state FROM idem_job AS j WHERE j.id = o.job_id),
                           'completed') NOT IN ('scheduled', 'available', 'running',
                                                'retryable', 'dead', 'cancelled')
              AND NOT EXISTS (SELECT 1 FROM idem_job AS w
                              WHERE w.awaited_intent = o.key AND w.state <> 'completed')
            ORDER BY o.created_at
            LIMIT $2))
      AND i.created_at < $1
      AND i.updated_at < $1
      AND i.state IN ('completed', 'failed', 'released')
      AND coalesce((SELECT j.state FROM idem_job AS j WHERE j.id = i.job_id),
                   'completed') NOT IN ('scheduled', 'available', 'running', 'retryable',
                                        'dead', 'cancelled')
      AND NOT EXISTS (SELECT 1 FROM idem_job AS w
                      WHERE w.awaited_intent = i.key AND w.state <> 'completed')
    RETURNING 1
)
SELECT count(*) FROM gone
