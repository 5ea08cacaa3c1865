-- Pauses queue ?1 at ?2 (ms; NULL = database clock), by ?3; a queue already paused keeps
-- its first pause (no row returned).
INSERT INTO idem_queue_pause (queue, paused_at, paused_by)
VALUES (?1, coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)), ?3)
ON CONFLICT (queue) DO NOTHING
RETURNING queue
