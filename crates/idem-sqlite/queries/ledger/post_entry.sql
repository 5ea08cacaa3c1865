-- Inserts ledger entry ?1 (account ?2, amount ?3) for job ?4 under fence ?5, at ?6 (ms,
-- NULL = database clock). Returns the key when inserted; no row when the key exists or
-- the claim is not current (ledger/get_entry.sql tells the two apart). The primary key is
-- the only arbiter of duplicates.
INSERT INTO idem_ledger_entry (entry_key, account, amount, job_id, created_at)
SELECT ?1, ?2, ?3, ?4, coalesce(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE EXISTS (SELECT 1 FROM idem_job WHERE id = ?4 AND fence = ?5 AND state = 'running')
ON CONFLICT (entry_key) DO NOTHING
RETURNING entry_key
