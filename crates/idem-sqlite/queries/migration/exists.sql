-- Whether idem's migrations table exists (1) or not (0): a database idem never migrated
-- has none, and a read must not create it.
SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'idem_migration'
