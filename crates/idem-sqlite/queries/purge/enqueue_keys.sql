-- Purges up to ?2 enqueue keys whose window started before ?1 (ms), oldest first (a key's
-- window starts at the later of its creation and its job's run_at), except those whose
-- job may still run (scheduled, available, running, retryable): a key never lapses while
-- its job waits, however long. SQLite dialect: the single writer already serialises a
-- purge with a take-over; the outer predicates mirror PostgreSQL's, where they are what
-- keeps a key taken over meanwhile.
DELETE FROM idem_enqueue_key
WHERE rowid IN (
        SELECT o.rowid FROM idem_enqueue_key AS o
        WHERE o.window_start < ?1
          AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                          WHERE h.id = o.job_id
                            AND h.state IN ('scheduled', 'available', 'running',
                                            'retryable'))
        ORDER BY o.window_start LIMIT ?2)
  AND window_start < ?1
  AND NOT EXISTS (SELECT 1 FROM idem_job AS h
                  WHERE h.id = idem_enqueue_key.job_id
                    AND h.state IN ('scheduled', 'available', 'running', 'retryable'))
