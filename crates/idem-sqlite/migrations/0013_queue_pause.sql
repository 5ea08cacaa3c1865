-- 0013_queue_pause: queues an operator paused. A queue with a row here is not claimed
-- from (the claim statement tests for the row); enqueues into it go on, and deleting the
-- row (resume) lets workers drain what waited. paused_by names who paused it (an API
-- principal, `cli`, or NULL).
-- SQLite dialect: times are INTEGER milliseconds.
CREATE TABLE idem_queue_pause (
    queue     TEXT    NOT NULL PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 255),
    paused_at INTEGER NOT NULL,
    paused_by TEXT    CHECK (paused_by IS NULL OR length(paused_by) BETWEEN 1 AND 128)
) WITHOUT ROWID;
