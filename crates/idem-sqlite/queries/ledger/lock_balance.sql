-- Creates the running total of account ?1 at 0 (stamped with the database clock) if the
-- account has none, so that ledger/set_balance.sql, the next statement, has a row to set.
-- SQLite dialect: the single writer already serialises a rebuild with every post, so
-- there is no row lock to take (PostgreSQL locks the account's row here, before the sum).
INSERT INTO idem_ledger_balance (account, balance, updated_at)
VALUES (?1, 0, CAST(unixepoch('subsec') * 1000 AS INTEGER))
ON CONFLICT (account) DO NOTHING
