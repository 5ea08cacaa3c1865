-- Sets the running total of account $1 to the sum of its entries, stamped with the
-- database clock (a repair is an operator's act, not a job's). Runs after
-- ledger/lock_balance.sql in the same transaction: the sum is read by this statement's
-- own snapshot, taken after the account's row was locked, so it counts every post that
-- committed before (a sum computed in the locking statement would be as old as that
-- statement's start, and would overwrite a post it waited for).
-- PostgreSQL dialect: sum(bigint) is numeric, cast back to bigint.
UPDATE idem_ledger_balance
SET balance = (SELECT coalesce(sum(amount), 0)::bigint FROM idem_ledger_entry
               WHERE account = $1),
    updated_at = now()
WHERE account = $1
