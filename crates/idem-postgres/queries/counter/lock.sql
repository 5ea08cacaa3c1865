-- Creates counter $1 at 0 if missing and locks its row until the transaction ends, so
-- allocations on one counter run one at a time; returns its value.
-- PostgreSQL dialect: the no-op DO UPDATE takes the row lock (SQLite's single writer
-- already serialises everything).
INSERT INTO idem_counter (name, value) VALUES ($1, 0)
ON CONFLICT (name) DO UPDATE SET value = idem_counter.value
RETURNING value
