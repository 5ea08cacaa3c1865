-- Extends the leadership of (?1 name, ?2 holder, ?3 fence) to ?5 + ?4 ms (?4 = 0 ends
-- it now: a resignation) while it is current at now (?5, ms). Returns the row; nothing
-- when the leadership was lost.
UPDATE idem_leader
SET expires_at = ?5 + ?4
WHERE name = ?1 AND holder = ?2 AND fence = ?3 AND expires_at > ?5
RETURNING name, holder, fence, elected_at, expires_at
