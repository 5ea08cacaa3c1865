-- How many Idempotency-Key records purge/http_keys.sql would delete with cutoff ?1 (ms):
-- those created before it,
-- but a reservation whose lock outlives it.
SELECT count(*) FROM idem_http_key WHERE created_at < ?1
  AND NOT (state = 'in_progress' AND locked_until > ?1)
