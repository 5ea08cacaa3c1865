-- Resumes queue $1; no row returned when it was not paused.
DELETE FROM idem_queue_pause WHERE queue = $1 RETURNING queue
