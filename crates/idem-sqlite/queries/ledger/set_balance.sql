-- Sets the running total of account ?1 to the sum of its entries, stamped with the
-- database clock (a repair is an operator's act, not a job's). Runs after
-- ledger/lock_balance.sql in the same transaction.
UPDATE idem_ledger_balance
SET balance = (SELECT coalesce(CAST(sum(amount) AS INTEGER), 0) FROM idem_ledger_entry
               WHERE account = ?1),
    updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)
WHERE account = ?1
