-- The database clock.
-- PostgreSQL dialect: a timestamptz (SQLite: milliseconds since the Unix epoch).
SELECT now() AS now
