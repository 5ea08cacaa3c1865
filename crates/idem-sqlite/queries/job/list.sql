-- Jobs newest first, filtered by state ?1, queue ?2, kind ?3, principal ?6 (NULL = any),
-- ids below ?4 (NULL = from the newest), at most ?5 rows.
SELECT * FROM idem_job
WHERE (?1 IS NULL OR state = ?1)
  AND (?2 IS NULL OR queue = ?2)
  AND (?3 IS NULL OR kind = ?3)
  AND (?6 IS NULL OR principal = ?6)
  AND (?4 IS NULL OR id < ?4)
ORDER BY id DESC
LIMIT ?5
