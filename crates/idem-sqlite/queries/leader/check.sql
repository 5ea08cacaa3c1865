-- The fence of (?1 name, ?2 holder, ?3 fence) when that leadership is current at now
-- (?4, ms); nothing when it was lost.
-- SQLite dialect: no row lock; the transaction holds the database's one write lock
-- until it ends, so no election can come between this check and the commit.
SELECT fence
FROM idem_leader
WHERE name = ?1 AND holder = ?2 AND fence = ?3 AND expires_at > ?4
