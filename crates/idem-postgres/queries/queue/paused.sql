-- Every paused queue, by name.
SELECT queue, paused_at, paused_by FROM idem_queue_pause ORDER BY queue
