-- Claims effect key $1 (kind $2) for job $3 under fence $4, at $5 (timestamptz, NULL =
-- database clock). Returns the key when this statement inserted it; no row when the key
-- exists or when claim ($3, $4) is not current (the caller tells the two apart with
-- effect/get.sql). The primary key is the only arbiter: a concurrent insert of the same
-- key waits for the other transaction and then does nothing if that one committed. The
-- fence is checked here too, so a stale claim cannot record a key even if it skipped
-- job/lock.sql.
INSERT INTO idem_effect (key, kind, job_id, fence, created_at)
SELECT $1, $2, $3, $4, coalesce($5::timestamptz, now())
WHERE EXISTS (SELECT 1 FROM idem_job WHERE id = $3 AND fence = $4 AND state = 'running')
ON CONFLICT (key) DO NOTHING
RETURNING key
