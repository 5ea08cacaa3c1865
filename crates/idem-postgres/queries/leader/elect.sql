-- Elects $2 to lead $1 until now + $3 ms when nobody leads it at now ($4 timestamptz,
-- NULL = the database clock): no row yet, or a lease that ended at or before now. The
-- new leader gets the next fence. Returns the row when elected, nothing when another
-- leads (current.sql then says who).
-- PostgreSQL dialect: ON CONFLICT DO UPDATE locks the existing row and tests its WHERE
-- on the latest committed version, so of two candidates racing only the first is
-- elected, and a candidate waits for a leader's transaction that holds the row
-- (check.sql) before it judges the lease. The row stays locked until the transaction
-- ends, elected or not, so the statement sets the transaction's
-- idle_in_transaction_session_timeout to the lease (at least 1 s, at most PostgreSQL's
-- limit): a candidate stopped before its commit loses its session and the row.
INSERT INTO idem_leader AS l (name, holder, fence, elected_at, expires_at)
SELECT $1, $2, 1, t.now, t.now + $3 * interval '1 millisecond'
FROM (SELECT coalesce($4::timestamptz, now()) AS now,
             set_config('idle_in_transaction_session_timeout',
                        least(2147483647, greatest(1000, $3))::bigint::text, true)) AS t
ON CONFLICT (name) DO UPDATE
SET holder = EXCLUDED.holder, fence = l.fence + 1, elected_at = EXCLUDED.elected_at,
    expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= EXCLUDED.elected_at
RETURNING l.name, l.holder, l.fence, l.elected_at, l.expires_at, l.elected_at AS now
