-- Intents in states $1 (text[]), unkeyed = $2 (NULL = either), last changed before $3,
-- created at or after $4, of job $5, of a job (still in idem_job) enqueued by principal
-- $8, with keys after $6 (NULL = any of these), at most $7, in key order.
SELECT * FROM idem_intent
WHERE state = ANY($1::text[])
  AND ($2::boolean IS NULL OR unkeyed = $2)
  AND ($3::timestamptz IS NULL OR updated_at < $3)
  AND ($4::timestamptz IS NULL OR created_at >= $4)
  AND ($5::bigint IS NULL OR job_id = $5)
  AND ($8::text IS NULL
       OR job_id IN (SELECT id FROM idem_job WHERE principal = $8::text))
  AND ($6::text IS NULL OR key > $6)
ORDER BY key
LIMIT $7
