-- Takes the enqueue keys of jobs just inserted. ?1: JSON array of {queue, key, job_id};
-- ?2: the window in ms; ?3: now in ms, NULL = database clock. A key not held is inserted;
-- a key held since before now - window is handed to the new job; a key held inside the
-- window is left alone. Returns the job ids that got their key.
-- SQLite dialect: the upsert's SELECT needs a WHERE for the parser to tell its ON CONFLICT
-- from a join's ON (`WHERE true`).
INSERT INTO idem_enqueue_key (queue, key, job_id, created_at)
SELECT e.value ->> 'queue', e.value ->> 'key', e.value ->> 'job_id', t.now
FROM json_each(?1) AS e,
     (SELECT coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS t
WHERE true
ON CONFLICT (queue, key) DO UPDATE
    SET job_id = excluded.job_id, created_at = excluded.created_at
    WHERE idem_enqueue_key.created_at < excluded.created_at - ?2
RETURNING job_id
