-- Ledger entry ?1 (read only after ledger/post_entry.sql inserted nothing).
SELECT entry_key, account, amount, job_id, created_at FROM idem_ledger_entry WHERE entry_key = ?1
