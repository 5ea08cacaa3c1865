-- Records the outcome of intent $1 held by fence $2: state $3 with result $4 (jsonb),
-- error $5 and remote ids $6 (jsonb array), at $7 (timestamptz, NULL = database clock).
-- Only while that fence holds it in progress; a lapsed lease nobody took over still
-- holds (a takeover moves the fence). No row: lost.
UPDATE idem_intent
SET state = $3,
    result = $4,
    error = $5,
    remote_refs = $6,
    lease_expires_at = NULL,
    updated_at = coalesce($7::timestamptz, now())
WHERE key = $1
  AND fence = $2
  AND state = 'in_progress'
RETURNING *
