-- Extends the leadership of ($1 name, $2 holder, $3 fence) to now + $4 ms ($4 = 0 ends
-- it now: a resignation) while it is current at now ($5 timestamptz, NULL = the
-- database clock). Returns the row; nothing when the leadership was lost.
-- PostgreSQL dialect: the predicates stand on the UPDATE itself, so a renewal that
-- waited for an election's row lock tests them again on the elected row. As in
-- elect.sql, the transaction's idle timeout is set to the lease (1 s at least), so a
-- leader stopped before its commit does not hold the row for ever.
UPDATE idem_leader AS l
SET expires_at = t.now + $4 * interval '1 millisecond'
FROM (SELECT coalesce($5::timestamptz, now()) AS now,
             set_config('idle_in_transaction_session_timeout',
                        least(2147483647, greatest(1000, $4))::bigint::text, true)) AS t
WHERE l.name = $1 AND l.holder = $2 AND l.fence = $3 AND l.expires_at > t.now
RETURNING l.name, l.holder, l.fence, l.elected_at, l.expires_at, t.now
