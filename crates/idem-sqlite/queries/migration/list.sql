-- Every migration recorded, with its name and when it was applied (milliseconds).
SELECT version, name, applied_at FROM idem_migration ORDER BY version
