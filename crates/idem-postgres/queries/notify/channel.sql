-- The notification channel of this idem schema: one per schema, so that installations
-- sharing a database never wake each other. At most 63 bytes, PostgreSQL's limit.
-- PostgreSQL only: SQLite has no channel between processes (its workers poll).
SELECT left('idem:' || current_schema(), 63) AS channel
