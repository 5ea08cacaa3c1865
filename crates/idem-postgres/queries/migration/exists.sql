-- Whether idem's migrations table exists in the session's search_path: a database idem
-- never migrated has none, and a read must not create it.
-- PostgreSQL dialect: to_regclass resolves the name as the statements that follow would
-- (SQLite: a look in sqlite_schema).
SELECT to_regclass('idem_migration') IS NOT NULL
