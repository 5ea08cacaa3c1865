-- The jobs $1 (bigint[]), in id order.
SELECT * FROM idem_job WHERE id = ANY($1::bigint[]) ORDER BY id
