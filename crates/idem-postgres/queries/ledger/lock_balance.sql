-- Locks the running total of account $1 until the transaction ends, creating it at 0
-- (stamped with the database clock) if the account has none, so that a rebuild's sum
-- (ledger/set_balance.sql, the next statement) is taken only once no post of the
-- account is in flight.
-- PostgreSQL dialect: the no-op DO UPDATE takes the row lock, after waiting for a
-- concurrent post's transaction that holds it (SQLite's single writer already
-- serialises the rebuild with every post).
INSERT INTO idem_ledger_balance (account, balance, updated_at)
VALUES ($1, 0, now())
ON CONFLICT (account) DO UPDATE SET balance = idem_ledger_balance.balance
