-- Stores the response of the request holding Idempotency-Key $2 of principal $1 at fence
-- $3: status $4, headers $5 (jsonb), body $6 (bytea), and marks it completed. Only while
-- that fence holds it in progress; a lapsed lock nobody took over still holds (a
-- takeover moves the fence). No row changed: the request no longer holds the key.
-- PostgreSQL dialect: an update that waited for a takeover re-checks fence and state
-- against the row the takeover committed, and changes nothing.
UPDATE idem_http_key
SET state = 'completed',
    status = $4,
    headers = $5,
    body = $6
WHERE principal = $1
  AND key = $2
  AND fence = $3
  AND created_at = $7::timestamptz
  AND state = 'in_progress'
