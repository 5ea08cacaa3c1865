-- Idempotency-Key ?2 of principal ?1, with the clock the reservation judged it by: ?3
-- (ms, NULL = database clock) as `now`.
SELECT k.*, coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now
FROM idem_http_key AS k
WHERE k.principal = ?1 AND k.key = ?2
