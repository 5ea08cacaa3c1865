-- Every account whose running total differs from the sum of its entries, including
-- accounts with entries and no total, and totals other than zero with no entries.
-- PostgreSQL dialect: sum(bigint) is numeric, cast back to bigint.
SELECT s.account, b.balance, s.sum, s.entries
FROM (SELECT account, sum(amount)::bigint AS sum, count(*) AS entries
      FROM idem_ledger_entry GROUP BY account) AS s
LEFT JOIN idem_ledger_balance b ON b.account = s.account
WHERE b.balance IS DISTINCT FROM s.sum
UNION ALL
SELECT b.account, b.balance, 0::bigint, 0::bigint
FROM idem_ledger_balance b
WHERE b.balance <> 0
  AND NOT EXISTS (SELECT 1 FROM idem_ledger_entry e WHERE e.account = b.account)
ORDER BY 1
