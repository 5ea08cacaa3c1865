-- Purges up to ?2 enqueue keys taken before ?1 (ms), oldest first.
DELETE FROM idem_enqueue_key
WHERE rowid IN (SELECT rowid FROM idem_enqueue_key
                WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)
