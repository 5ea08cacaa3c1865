-- Pauses queue $1 at $2 (NULL = database clock), by $3; a queue already paused keeps its
-- first pause (no row returned).
INSERT INTO idem_queue_pause (queue, paused_at, paused_by)
VALUES ($1, coalesce($2::timestamptz, now()), $3)
ON CONFLICT (queue) DO NOTHING
RETURNING queue
