-- Deletes the shard counts of batches ?1 (JSON array of ids) just purged.
-- SQLite only: PostgreSQL deletes them in purge/batches.sql's statement (a data-modifying
-- CTE), which SQLite does not have.
DELETE FROM idem_batch_shard WHERE batch_id IN (SELECT value FROM json_each(?1))
