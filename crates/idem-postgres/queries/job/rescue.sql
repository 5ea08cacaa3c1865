-- Moves up to $1 running jobs whose lease expired before now ($3 timestamptz, NULL =
-- database clock) to retryable, or to dead when no attempts are left (the job's
-- max_attempts, or the cap $4 when lower; NULL = no cap). A retryable job runs again at
-- now + $2 ms, or with $2 = 0 keeps its run_at, so its place in claim order.
-- PostgreSQL dialect: the candidates are locked with FOR UPDATE SKIP LOCKED, so a job whose
-- row an in-flight effect transaction holds (job/lock.sql) is skipped, not rescued under it;
-- the next sweep sees it again if its lease is still expired. Each rescued job's lost
-- attempt (`lease_expired`) is recorded by a data-modifying CTE of the same statement.
-- The state and expiry predicates stand on the outer UPDATE as well (the rule that the
-- predicates deciding a write stand on the outer statement).
WITH picked AS (
    SELECT id FROM idem_job
    WHERE state = 'running'
      AND lease_expires_at < coalesce($3::timestamptz, now())
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
done AS (
    UPDATE idem_job
    SET state = CASE WHEN attempt >= least(max_attempts, coalesce($4::integer, max_attempts)) THEN 'dead' ELSE 'retryable' END,
        run_at = CASE WHEN attempt >= least(max_attempts, coalesce($4::integer, max_attempts)) THEN run_at
                      WHEN $2::bigint = 0 THEN run_at
                      ELSE coalesce($3::timestamptz, now()) + $2::bigint * interval '1 millisecond'
                 END,
        finalized_at = CASE WHEN attempt >= least(max_attempts, coalesce($4::integer, max_attempts))
                            THEN coalesce($3::timestamptz, now()) END,
        last_error = 'lease expired: the worker holding fence ' || fence
                     || ' stopped heartbeating (crashed, paused or partitioned)',
        lease_expires_at = NULL
    FROM picked
    WHERE idem_job.id = picked.id
      AND idem_job.state = 'running'
      AND idem_job.lease_expires_at < coalesce($3::timestamptz, now())
    RETURNING idem_job.*
), recorded AS (
    INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at,
                                  finished_at)
    SELECT id, attempt, fence, 'lease_expired', last_error, attempted_at,
           coalesce($3::timestamptz, now())
    FROM done
)
SELECT * FROM done
