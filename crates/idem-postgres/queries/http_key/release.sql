-- Gives back Idempotency-Key $2 of principal $1 held at fence $3 without a stored
-- response: released, the row kept (with its fence) so that the next reservation takes
-- it with fence + 1. Only while that fence and the reservation's created_at ($4) hold it in
-- progress (a purge that re-created the row restarted its fence). No row changed: the
-- request no longer holds the key.
UPDATE idem_http_key
SET state = 'released',
    status = NULL,
    headers = NULL,
    body = NULL
WHERE principal = $1
  AND key = $2
  AND fence = $3
  AND created_at = $4::timestamptz
  AND state = 'in_progress'
