-- Serialises concurrent migrators: a transaction-level advisory lock on idem's key $1,
-- released at commit or rollback.
-- PostgreSQL only: SQLite's migrate() holds the database write lock (BEGIN IMMEDIATE) from
-- its first statement, so it has no counterpart file.
SELECT pg_advisory_xact_lock($1)
