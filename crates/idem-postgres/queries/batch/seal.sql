-- Seals batch $1 if it is open; $2 timestamptz, NULL = database clock. No row: the batch is
-- already sealed or finished, or missing.
UPDATE idem_batch
SET state = 'sealed',
    sealed_at = coalesce($2::timestamptz, now())
WHERE id = $1 AND state = 'open'
RETURNING id
