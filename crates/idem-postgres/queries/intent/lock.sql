-- Intent $1, share-locked until the transaction ends: a resolution's UPDATE waits for
-- it, and this read waits for an UPDATE in flight, then reads the row as committed
-- (or nothing, when it was deleted).
SELECT * FROM idem_intent WHERE key = $1 FOR SHARE
