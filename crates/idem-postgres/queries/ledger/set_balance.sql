-- Sets the running total of account $1 to the sum of its entries, recomputed in this
-- transaction, stamped with the database clock (a repair is an operator's act, not a
-- job's).
-- PostgreSQL dialect: sum(bigint) is numeric, cast back to bigint.
INSERT INTO idem_ledger_balance (account, balance, updated_at)
VALUES ($1,
        (SELECT coalesce(sum(amount), 0)::bigint FROM idem_ledger_entry WHERE account = $1),
        now())
ON CONFLICT (account) DO UPDATE
SET balance = excluded.balance,
    updated_at = excluded.updated_at
