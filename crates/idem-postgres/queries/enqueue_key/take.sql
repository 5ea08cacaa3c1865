-- Takes the enqueue keys of jobs just inserted. $1: JSON array of {queue, key, job_id};
-- $2: the window in ms; $3: now as timestamptz, NULL = database clock. A key not held is
-- inserted; a key held since before now - window is handed to the new job; a key held
-- inside the window is left alone. Returns the job ids that got their key.
-- PostgreSQL dialect: a concurrent transaction taking the same key makes this statement
-- wait on the unique index entry until it ends; then ON CONFLICT sees its row.
INSERT INTO idem_enqueue_key AS k (queue, key, job_id, created_at)
SELECT e.queue, e.key, e.job_id, t.now
FROM jsonb_to_recordset($1::jsonb) AS e(queue text, key text, job_id bigint),
     (SELECT coalesce($3::timestamptz, now()) AS now) AS t
ON CONFLICT (queue, key) DO UPDATE
    SET job_id = excluded.job_id, created_at = excluded.created_at
    WHERE k.created_at < excluded.created_at - $2::bigint * interval '1 millisecond'
RETURNING job_id
