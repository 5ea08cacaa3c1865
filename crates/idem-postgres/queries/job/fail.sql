-- Records a failed attempt of job $1 under fence $2 with error $4: retryable at now + $3 ms,
-- or dead when $3 is NULL or no attempts are left. $5 timestamptz, NULL = database clock.
-- $6 true = snooze: scheduled at now + $3 ms with the claim's attempt given back and the
-- snooze counted (snoozes + 1), never dead; a snooze keeps the last error (its message is
-- in the attempt history).
-- $7 false leaves a child of a batch alone (the store's one-statement path, whose caller
-- fails it again in a transaction that counts its batch).
-- The attempt row (retryable, dead or snoozed, with the claim's attempt number) is written
-- in the same statement; no row: the claim is not current and nothing was written.
-- PostgreSQL dialect: the attempt row comes from a data-modifying CTE (SQLite runs
-- job_attempt/insert.sql after the update); $3 is cast to bigint because `$3 IS NULL`
-- alone gives PostgreSQL no type to infer.
WITH done AS (
    UPDATE idem_job
    SET state = CASE WHEN $6 THEN 'scheduled'
                     WHEN $3::bigint IS NULL OR attempt >= max_attempts THEN 'dead'
                     ELSE 'retryable' END,
        attempt = CASE WHEN $6 THEN attempt - 1 ELSE attempt END,
        snoozes = CASE WHEN $6 THEN snoozes + 1 ELSE snoozes END,
        run_at = CASE WHEN NOT $6 AND ($3::bigint IS NULL OR attempt >= max_attempts) THEN run_at
                      ELSE coalesce($5::timestamptz, now()) + $3::bigint * interval '1 millisecond'
                 END,
        finalized_at = CASE WHEN NOT $6 AND ($3::bigint IS NULL OR attempt >= max_attempts)
                            THEN coalesce($5::timestamptz, now()) END,
        last_error = CASE WHEN $6 THEN last_error ELSE $4 END,
        lease_expires_at = NULL
    WHERE id = $1 AND fence = $2 AND state = 'running' AND ($7 OR batch_id IS NULL)
    RETURNING *
), recorded AS (
    INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at,
                                  finished_at)
    SELECT id, attempt + CASE WHEN $6 THEN 1 ELSE 0 END, fence,
           CASE WHEN $6 THEN 'snoozed' WHEN state = 'dead' THEN 'dead' ELSE 'retryable' END,
           $4, attempted_at, coalesce($5::timestamptz, now())
    FROM done
)
SELECT * FROM done
