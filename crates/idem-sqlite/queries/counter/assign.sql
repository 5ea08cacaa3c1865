-- Assigns number ?3 of counter ?1 to effect key ?2 for job ?4, at ?5 (ms, NULL = database
-- clock). Runs right after counter/bump.sql in the same transaction.
-- SQLite dialect: see counter/bump.sql.
INSERT INTO idem_counter_number (key, counter, number, job_id, created_at)
VALUES (?2, ?1, ?3, ?4, coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
