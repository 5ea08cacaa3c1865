-- Elects ?2 to lead ?1 until ?4 + ?3 ms when nobody leads it at now (?4, ms): no row
-- yet, or a lease that ended at or before now. The new leader gets the next fence.
-- Returns the row when elected, nothing when another leads (current.sql then says who).
-- SQLite dialect: now is read once by the store and bound, and the single writer makes
-- the test and the write one step.
INSERT INTO idem_leader (name, holder, fence, elected_at, expires_at)
VALUES (?1, ?2, 1, ?4, ?4 + ?3)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, fence = idem_leader.fence + 1,
    elected_at = excluded.elected_at, expires_at = excluded.expires_at
WHERE idem_leader.expires_at <= excluded.elected_at
RETURNING name, holder, fence, elected_at, expires_at
