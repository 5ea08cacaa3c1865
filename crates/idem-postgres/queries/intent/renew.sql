-- Extends intent $1's lease to now + $3 ms (at $4, timestamptz, NULL = database clock)
-- while fence $2 holds it in progress and its lease has not ended. No row: lost.
UPDATE idem_intent
SET lease_expires_at = coalesce($4::timestamptz, now()) + $3 * interval '1 millisecond',
    updated_at = coalesce($4::timestamptz, now())
WHERE key = $1
  AND fence = $2
  AND state = 'in_progress'
  AND lease_expires_at >= coalesce($4::timestamptz, now())
RETURNING *
