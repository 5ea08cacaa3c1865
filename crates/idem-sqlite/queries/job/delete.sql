-- Deletes jobs ?1 (JSON array of ids) inserted in this transaction whose enqueue key was
-- held.
DELETE FROM idem_job WHERE id IN (SELECT value FROM json_each(?1))
