-- One job by id.
SELECT * FROM idem_job WHERE id = ?1
