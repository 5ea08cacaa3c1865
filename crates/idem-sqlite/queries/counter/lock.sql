-- Creates counter ?1 at 0 if missing; returns its value.
-- SQLite dialect: the single writer already serialises allocations (PostgreSQL locks the
-- counter's row here).
INSERT INTO idem_counter (name, value) VALUES (?1, 0)
ON CONFLICT (name) DO UPDATE SET value = idem_counter.value
RETURNING value
