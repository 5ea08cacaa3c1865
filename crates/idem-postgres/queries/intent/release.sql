-- Deletes intent $1 held in progress by fence $2: its call certainly never left, so the
-- next begin starts afresh. No row: lost.
DELETE FROM idem_intent
WHERE key = $1
  AND fence = $2
  AND state = 'in_progress'
RETURNING key
