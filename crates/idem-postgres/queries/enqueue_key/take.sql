-- Takes the enqueue keys of jobs just inserted. $1: JSON array of {queue, key, job_id};
-- $2: the window in ms; $3: now as timestamptz, NULL = database clock. A key not held is
-- inserted; a key whose window started before now - window, and whose job has finished
-- (or is gone), is handed to the new job; any other key is left alone: a key never
-- lapses while its job may still run, however long it waits (a backlog, a kind no worker
-- handles yet), so a re-sent request never becomes a second job beside it. A key's window starts at the later of its
-- creation and its job's run_at (read from the job inserted in this transaction), so a
-- job scheduled ahead keeps its key until it has run. Returns the job ids that got
-- their key.
-- PostgreSQL dialect: a concurrent transaction taking the same key makes this statement
-- wait on the unique index entry until it ends; then ON CONFLICT sees its row, and the
-- DO UPDATE's WHERE is judged on that latest version.
INSERT INTO idem_enqueue_key AS k (queue, key, job_id, created_at, window_start)
SELECT e.queue, e.key, e.job_id, t.now, greatest(t.now, j.run_at)
FROM jsonb_to_recordset($1::jsonb) AS e(queue text, key text, job_id bigint)
     JOIN idem_job AS j ON j.id = e.job_id,
     (SELECT coalesce($3::timestamptz, now()) AS now) AS t
ORDER BY e.queue, e.key
ON CONFLICT (queue, key) DO UPDATE
    SET job_id = excluded.job_id,
        created_at = excluded.created_at,
        window_start = excluded.window_start
    WHERE k.window_start < excluded.created_at - $2::bigint * interval '1 millisecond'
      AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                      WHERE h.id = k.job_id
                        AND h.state IN ('scheduled', 'available', 'running', 'retryable'))
RETURNING job_id
