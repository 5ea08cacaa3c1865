-- Inserts jobs of a batch: the store appends one copy of `job/insert_values.sql` per job
-- (up to a fixed number per statement, each size prepared once) and binds every column
-- itself: the id (one more than the highest ever used, read once per batch by
-- `job/next_id.sql`, so ids follow the batch's order), the state and the claim columns it
-- computed from the batch's one clock reading and the queue's pause. No RETURNING and no
-- SELECT: SQLite runs either through a temporary table per execution, which cost more
-- than the row itself.
-- SQLite dialect: rows bound one by one into a prepared multi-row insert, SQLite's fastest
-- bulk insert (PostgreSQL unpacks the whole batch from arrays in one statement).
INSERT INTO idem_job (id, kind, queue, args, priority, state, max_attempts, run_at,
                      created_at, attempt, fence, lease_owner, attempted_at,
                      lease_expires_at, enqueue_key, principal, batch_id, follows_job_id,
                      follows_batch_id, trace_parent)
VALUES
