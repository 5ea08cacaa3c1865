-- The notification channel of this idem schema: one per schema, so that installations
-- sharing a database never wake each other. At most 63 bytes, PostgreSQL's limit.
-- PostgreSQL only: SQLite's channel between processes is datagram Unix sockets in a
-- directory beside the database file (idem-sqlite's notify.rs, Linux only), no SQL.
SELECT left('idem:' || current_schema(), 63) AS channel
