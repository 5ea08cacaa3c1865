-- Whether the schema $1 exists, checked instead of created when a store opens an existing
-- database (PgStore::open_existing), so a read never creates one.
-- PostgreSQL only: an SQLite database is a file, whose existence the store checks itself.
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)
