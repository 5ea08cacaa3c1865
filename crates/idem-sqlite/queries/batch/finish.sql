-- Marks batch ?1 finished with its successor ?2, if it is sealed, has no successor yet and
-- every child of every shard is finished; ?3 ms, NULL = database clock. No row otherwise.
UPDATE idem_batch
SET state = 'finished',
    successor_job_id = ?2,
    finished_at = coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE id = ?1
  AND state = 'sealed'
  AND successor_job_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM idem_batch_shard AS s
                  WHERE s.batch_id = ?1 AND s.completed + s.dead + s.cancelled < s.total)
RETURNING id
