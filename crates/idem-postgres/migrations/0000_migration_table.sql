-- idem's own record of applied migrations; created before anything else runs.
-- PostgreSQL dialect: applied_at is timestamptz (SQLite: INTEGER milliseconds). migrate()
-- runs this under pg_advisory_xact_lock, so concurrent migrators cannot race on it.
CREATE TABLE IF NOT EXISTS idem_migration (
    version    bigint      PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
)
