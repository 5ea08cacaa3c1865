-- Resolves intent $1 read at fence $2 in one of the states $3 (text[]): state $4, with
-- result $5 and remote ids $6 (jsonb, NULL = keep) and error $7 (NULL = keep), fence + 1,
-- at $8 (timestamptz, NULL = database clock). No row: its state or fence moved on, or it
-- does not exist (the caller tells them apart).
UPDATE idem_intent
SET state = $4,
    fence = fence + 1,
    result = coalesce($5, result),
    remote_refs = coalesce($6, remote_refs),
    error = coalesce($7, error),
    lease_expires_at = NULL,
    updated_at = coalesce($8::timestamptz, now())
WHERE key = $1
  AND fence = $2
  AND state = ANY($3::text[])
RETURNING *
