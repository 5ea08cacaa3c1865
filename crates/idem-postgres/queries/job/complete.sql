-- Completes job $1 if claim fence $2 is current, keeps its result $4 (jsonb, NULL = none),
-- and records the completed attempt, in one statement; $3 timestamptz, NULL = database
-- clock. $5 false leaves a child of a batch alone (the store's one-statement path, whose
-- caller completes it again in a transaction that counts its batch). No row: the claim is
-- not current (or $5 left a batch's child alone) and nothing was written.
-- PostgreSQL dialect: the attempt row is written by a data-modifying CTE of the same
-- statement (SQLite runs job_attempt/insert.sql after the update, in its transaction).
WITH done AS (
    UPDATE idem_job
    SET state = 'completed',
        finalized_at = coalesce($3::timestamptz, now()),
        lease_expires_at = NULL,
        result = $4::jsonb
    WHERE id = $1 AND fence = $2 AND state = 'running' AND ($5 OR batch_id IS NULL)
    RETURNING *
), recorded AS (
    INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at,
                                  finished_at)
    SELECT id, attempt, fence, 'completed', NULL, attempted_at, finalized_at FROM done
)
SELECT * FROM done
