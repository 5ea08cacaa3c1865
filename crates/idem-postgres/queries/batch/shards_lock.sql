-- Locks every shard row of batch $1, in shard order, to the end of the transaction: the
-- order every count takes them in, so an add in a transaction that also completes a
-- child of the batch (a child adding siblings) holds that child's shard before it is
-- needed instead of taking it out of order.
SELECT shard FROM idem_batch_shard WHERE batch_id = $1 ORDER BY shard FOR NO KEY UPDATE
