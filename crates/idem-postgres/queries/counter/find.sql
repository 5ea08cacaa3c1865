-- The number effect key $1 already has on counter $2 (read under the counter's row lock).
SELECT number FROM idem_counter_number WHERE key = $1 AND counter = $2
