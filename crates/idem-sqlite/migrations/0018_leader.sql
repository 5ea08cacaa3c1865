-- 0018_leader: who leads a group of duties that one process runs for all (the
-- maintenance sweeps: rescue and purge). One row per group, never deleted: holder is
-- the leading worker's name, fence counts the elections (each new leader gets the next
-- one, as a job's claim does), and the leadership ends at expires_at unless renewed.
-- SQLite dialect: times are INTEGER milliseconds.
CREATE TABLE idem_leader (
    name       TEXT    NOT NULL PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    holder     TEXT    NOT NULL CHECK (length(holder) BETWEEN 1 AND 255),
    fence      INTEGER NOT NULL CHECK (fence >= 1),
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
