-- Moves the counts of shard ?2 of batch ?1 by ?3 completed, ?4 dead and ?5 cancelled
-- children (negative for an operator's retry of a finished child), in the transaction
-- that moved the children. Returns whether the shard is complete now (every child of it
-- finished); no row: the shard has no row (its batch was purged).
-- SQLite dialect: one shard per statement, run for each shard changed (PostgreSQL moves
-- them all in one statement, from arrays); the transaction holds the database's write
-- lock, so nothing interleaves.
UPDATE idem_batch_shard
SET completed = completed + ?3,
    dead = dead + ?4,
    cancelled = cancelled + ?5
WHERE batch_id = ?1 AND shard = ?2
RETURNING shard, completed + dead + cancelled = total AS complete
