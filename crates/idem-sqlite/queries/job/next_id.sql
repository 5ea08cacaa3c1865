-- The highest job id ever used: AUTOINCREMENT keeps it in sqlite_sequence (a deleted id is
-- never reused); max(id) covers a table whose sequence row does not exist yet.
SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'idem_job'), 0),
           coalesce((SELECT max(id) FROM idem_job), 0))
