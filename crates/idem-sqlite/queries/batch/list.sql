-- Batches, newest first, with their counts summed over their shards: ?1 state (NULL =
-- any), ?2 principal (NULL = any), ?3 only ids below it (NULL = from the newest), ?4 at
-- most this many.
SELECT * FROM idem_batch_counted
WHERE (?1 IS NULL OR state = ?1)
  AND (?2 IS NULL OR principal = ?2)
  AND (?3 IS NULL OR id < ?3)
ORDER BY id DESC
LIMIT ?4
