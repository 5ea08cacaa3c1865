-- One batch by id, with its counts summed over its shards.
SELECT * FROM idem_batch_counted WHERE id = $1
