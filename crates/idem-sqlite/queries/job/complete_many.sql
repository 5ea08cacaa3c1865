-- Completes, in one statement, every job in ?1 (JSON array of {job_id, fence}) whose claim
-- is current; ?2 ms, NULL = database clock. ?3 0 leaves children of batches alone (the
-- store's one-hop path, whose caller completes them again in a transaction that counts
-- their batches). Returns the ids completed, each with its batch: a lease missing from
-- the result was not completed and nothing was written for it. The results of the jobs
-- completed are kept by job/set_result.sql, in the same transaction. Each completed
-- attempt is its job's row itself: no attempt row (job_attempt/list.sql).
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_expires_at = NULL
WHERE state = 'running'
  AND (?3 OR batch_id IS NULL)
  AND (id, fence) IN (SELECT l.value ->> 'job_id', l.value ->> 'fence' FROM json_each(?1) AS l)
RETURNING id, batch_id
