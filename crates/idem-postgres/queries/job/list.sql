-- Jobs newest first, filtered by state $1, queue $2, kind $3, principal $6 (NULL = any),
-- ids below $4 (NULL = from the newest), at most $5 rows.
-- PostgreSQL dialect: the optional filters are cast because `$n IS NULL` alone gives
-- PostgreSQL no type to infer.
SELECT * FROM idem_job
WHERE ($1::text IS NULL OR state = $1::text)
  AND ($2::text IS NULL OR queue = $2::text)
  AND ($3::text IS NULL OR kind = $3::text)
  AND ($6::text IS NULL OR principal = $6::text)
  AND ($4::bigint IS NULL OR id < $4::bigint)
ORDER BY id DESC
LIMIT $5
