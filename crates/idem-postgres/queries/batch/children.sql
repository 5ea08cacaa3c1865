-- A page of batch $1's children in id order: ids above $2 (NULL = from the first), at
-- most $3. Reads the partial index idem_job_batch.
SELECT * FROM idem_job
WHERE batch_id = $1 AND ($2::bigint IS NULL OR id > $2)
ORDER BY id
LIMIT $3
