-- Every migration recorded, with its name and when it was applied.
-- PostgreSQL dialect: applied_at is timestamptz (SQLite: INTEGER milliseconds).
SELECT version, name, applied_at FROM idem_migration ORDER BY version
