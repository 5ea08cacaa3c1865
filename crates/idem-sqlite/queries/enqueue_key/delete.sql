-- Deletes the enqueue keys held by jobs ?1 (JSON array of ids).
DELETE FROM idem_enqueue_key WHERE job_id IN (SELECT value FROM json_each(?1))
