-- Announces that jobs wait in the queues named in $1 (newline-separated; empty = any
-- queue) on this schema's channel (see notify/channel.sql). Sent after the enqueue
-- committed, at most one at a time per client, so many enqueues share one notification.
-- PostgreSQL only: SQLite has no channel between processes (its workers poll).
SELECT pg_notify(left('idem:' || current_schema(), 63), $1)
