-- Versions already applied.
SELECT version FROM idem_migration ORDER BY version
