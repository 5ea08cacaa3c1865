-- Completes job ?1 if claim fence ?2 is current and keeps its result ?4 (JSON text, NULL =
-- none); ?3 ms, NULL = database clock. ?5 0 leaves a child of a batch alone (the store's
-- one-hop path, whose caller completes it again in a transaction that counts its batch).
-- The completed attempt is the job's row itself: no attempt row (job_attempt/list.sql).
-- SQLite dialect: no RETURNING (SQLite builds a temporary table for it on every execution,
-- a fifth of this statement's cost); the store reads the row back by id when one changed,
-- under the same write lock.
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_expires_at = NULL,
    result = json(?4)
WHERE id = ?1 AND fence = ?2 AND state = 'running' AND (?5 OR batch_id IS NULL)
