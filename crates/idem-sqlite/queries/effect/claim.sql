-- Claims effect key ?1 (kind ?2) for job ?3 under fence ?4, at ?5 (ms, NULL = database
-- clock). Returns the key when this statement inserted it; no row when the key exists or
-- when claim (?3, ?4) is not current (the caller tells the two apart with
-- effect/get.sql). The primary key is the only arbiter. The fence is checked here too,
-- so a stale claim cannot record a key even if it skipped job/lock.sql.
-- SQLite dialect: the single writer serialises claims; the WHERE of an INSERT … SELECT
-- needs `ON CONFLICT … DO NOTHING` after a WHERE clause (SQLite's parsing rule for
-- upserts on a SELECT), which the EXISTS provides.
INSERT INTO idem_effect (key, kind, job_id, fence, created_at)
SELECT ?1, ?2, ?3, ?4, coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE EXISTS (SELECT 1 FROM idem_job WHERE id = ?3 AND fence = ?4 AND state = 'running')
ON CONFLICT (key) DO NOTHING
RETURNING key
