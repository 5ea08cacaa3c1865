-- Deletes intent $1 read at fence $2 in one of the states $3 (text[]): reconciliation
-- found the call absent, so the next begin sends it again. No row: its state or fence
-- moved on, or it does not exist.
DELETE FROM idem_intent
WHERE key = $1
  AND fence = $2
  AND state = ANY($3::text[])
RETURNING key
