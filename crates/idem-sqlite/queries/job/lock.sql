-- The fence check that opens an effect transaction: the job, if claim (?1, ?2) is current.
-- SQLite dialect: BEGIN IMMEDIATE already holds the database's write lock, so a plain
-- read is enough to keep the row unchanged until commit.
SELECT * FROM idem_job WHERE id = ?1 AND fence = ?2 AND state = 'running'
