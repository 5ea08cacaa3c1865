-- The fence check that opens an effect transaction: the job, if claim ($1, $2) is current.
-- $3: the transaction's idle timeout in ms (bigint; NULL = the session's setting).
-- PostgreSQL dialect: FOR KEY SHARE holds a row lock until the transaction ends. It
-- conflicts with the FOR UPDATE of rescue (which skips the row) and of the attempt insert
-- that opens a cancel (which waits), so neither can interleave with the effect
-- transaction; it does not conflict with the worker's heartbeat UPDATE, so a long effect
-- transaction never holds up the renewal of the worker's other leases. A change committed
-- before the lock was taken is re-checked against the WHERE clause, so a stale fence finds
-- no row. The same statement sets idle_in_transaction_session_timeout for this
-- transaction (set_config(..., true)): a holder that stalls (a paused process) loses its
-- session after it, which releases the row, so the rescuer and a cancel are not held up
-- for ever. (SQLite: BEGIN IMMEDIATE already holds the database's write lock, so a plain
-- read is enough there, and it has no sessions to time out.)
SELECT *,
       set_config('idle_in_transaction_session_timeout',
                  coalesce($3::bigint::text,
                           current_setting('idle_in_transaction_session_timeout')),
                  true) AS idle_timeout
FROM idem_job
WHERE id = $1 AND fence = $2 AND state = 'running'
FOR KEY SHARE
