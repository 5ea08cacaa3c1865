-- Moves the running total of account ?1 by ?2, at ?3 (ms, NULL = database clock);
-- creates the total at ?2 for a new account. Runs only after ledger/post_entry.sql
-- inserted the entry, in the same transaction.
INSERT INTO idem_ledger_balance (account, balance, updated_at)
VALUES (?1, ?2, coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
ON CONFLICT (account) DO UPDATE
SET balance = idem_ledger_balance.balance + excluded.balance,
    updated_at = excluded.updated_at
