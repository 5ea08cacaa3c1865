-- idem's own record of applied migrations; created before anything else runs.
CREATE TABLE IF NOT EXISTS idem_migration (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)
