-- Takes the enqueue keys of jobs just inserted. ?1: JSON array of {queue, key, job_id};
-- ?2: the window in ms; ?3: now in ms, NULL = database clock. A key not held is inserted;
-- a key whose window started before now - window, and whose job has finished (or is
-- gone), is handed to the new job; any other key is left alone: a key never lapses while
-- its job may still run, however long it waits (a backlog, a kind no worker handles yet). A key's window starts at the later of its creation and its
-- job's run_at (read from the job inserted in this transaction), so a job scheduled
-- ahead keeps its key until it has run. Returns the job ids that got their key.
-- SQLite dialect: the upsert's SELECT needs a WHERE for the parser to tell its ON CONFLICT
-- from a join's ON (`WHERE true`).
INSERT INTO idem_enqueue_key (queue, key, job_id, created_at, window_start)
SELECT e.value ->> 'queue', e.value ->> 'key', e.value ->> 'job_id', t.now,
       max(t.now, j.run_at)
FROM json_each(?1) AS e
     JOIN idem_job AS j ON j.id = e.value ->> 'job_id',
     (SELECT coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS t
WHERE true
ON CONFLICT (queue, key) DO UPDATE
    SET job_id = excluded.job_id,
        created_at = excluded.created_at,
        window_start = excluded.window_start
    WHERE idem_enqueue_key.window_start < excluded.created_at - ?2
      AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                      WHERE h.id = idem_enqueue_key.job_id
                        AND h.state IN ('scheduled', 'available', 'running', 'retryable'))
RETURNING job_id
