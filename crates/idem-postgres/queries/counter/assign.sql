-- Raises counter $1 by one and assigns the new value to effect key $2 for job $3 under
-- fence $4, at $5 (timestamptz, NULL = database clock); returns the number. Nothing when
-- the claim is not current.
WITH bumped AS (
    UPDATE idem_counter SET value = value + 1
    WHERE name = $1
      AND EXISTS (SELECT 1 FROM idem_job WHERE id = $3 AND fence = $4 AND state = 'running')
    RETURNING value
)
INSERT INTO idem_counter_number (key, counter, number, job_id, created_at)
SELECT $2, $1, value, $3, coalesce($5::timestamptz, now()) FROM bumped
RETURNING number
