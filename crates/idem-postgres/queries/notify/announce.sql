-- Announces that jobs wait in the queues named in $1 (newline-separated; empty = any
-- queue) on this schema's channel (see notify/channel.sql). Sent after the enqueue
-- committed, at most one at a time per client, so many enqueues share one notification.
-- PostgreSQL only: SQLite's channel between processes is datagram Unix sockets in a
-- directory beside the database file (idem-sqlite's notify.rs, Linux only), no SQL.
SELECT pg_notify(left('idem:' || current_schema(), 63), $1)
