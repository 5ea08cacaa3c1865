-- Records migration ?1 named ?2 as applied now.
INSERT INTO idem_migration (version, name, applied_at)
VALUES (?1, ?2, CAST(unixepoch('subsec') * 1000 AS INTEGER))
