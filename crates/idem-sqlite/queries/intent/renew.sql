-- Extends intent ?1's lease to now + ?3 ms (at ?4 ms, NULL = database clock) while fence
-- ?2 holds it in progress and its lease has not ended. No row: lost.
UPDATE idem_intent
SET lease_expires_at = coalesce(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?3,
    updated_at = coalesce(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE key = ?1
  AND fence = ?2
  AND state = 'in_progress'
  AND lease_expires_at >= coalesce(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))
RETURNING *
