-- Purges up to ?2 enqueue keys whose window started before ?1 (ms), oldest first (a key's
-- window starts at the later of its creation and its job's run_at). SQLite dialect: the
-- single writer already serialises a purge with a take-over; the outer predicate mirrors
-- PostgreSQL's, where it is what keeps a key taken over meanwhile.
DELETE FROM idem_enqueue_key
WHERE rowid IN (SELECT rowid FROM idem_enqueue_key
                WHERE window_start < ?1 ORDER BY window_start LIMIT ?2)
  AND window_start < ?1
