-- Whether queue ?1 is paused: 1 or 0.
SELECT EXISTS (SELECT 1 FROM idem_queue_pause WHERE queue = ?1)
