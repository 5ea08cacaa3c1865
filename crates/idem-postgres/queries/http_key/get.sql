-- Idempotency-Key $2 of principal $1, with the clock the reservation judged it by: $3
-- (timestamptz, NULL = database clock) as `now`.
-- PostgreSQL dialect: the database clock is clock_timestamp(), as in reserve.sql.
SELECT k.*, coalesce($3::timestamptz, clock_timestamp()) AS now
FROM idem_http_key AS k
WHERE k.principal = $1 AND k.key = $2
