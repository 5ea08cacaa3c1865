-- The jobs ?1 (JSON array of ids), in id order.
SELECT * FROM idem_job WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id
