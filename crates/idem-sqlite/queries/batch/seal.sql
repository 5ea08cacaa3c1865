-- Seals batch ?1 if it is open; ?2 ms, NULL = database clock. No row: the batch is
-- already sealed or finished, or missing.
UPDATE idem_batch
SET state = 'sealed',
    sealed_at = coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE id = ?1 AND state = 'open'
RETURNING id
