-- Batch ?1's id if it exists; with ?2 true, only if it is open.
-- SQLite dialect: the transaction already holds the database's write lock (BEGIN
-- IMMEDIATE), so reading is enough; PostgreSQL locks the row here.
SELECT id FROM idem_batch WHERE id = ?1 AND (NOT ?2 OR state = 'open')
