-- Records migration $1 named $2 as applied now.
-- PostgreSQL dialect: applied_at is the transaction's timestamptz (SQLite: milliseconds).
INSERT INTO idem_migration (version, name, applied_at) VALUES ($1, $2, now())
