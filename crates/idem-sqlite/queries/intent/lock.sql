-- Intent ?1, read inside the writer's transaction: SQLite has one writer at a time, so
-- no resolution commits until this transaction ends.
SELECT * FROM idem_intent WHERE key = ?1
