-- Keeps result ?2 (JSON text) on job ?1, which this transaction just completed.
-- SQLite only: PostgreSQL sets the results of a batch of completions in
-- job/complete_many.sql, from arrays; SQLite, which would look each one up in a JSON
-- text, runs this prepared statement once per result instead (no round trip: the
-- database is in-process).
UPDATE idem_job SET result = json(?2) WHERE id = ?1
