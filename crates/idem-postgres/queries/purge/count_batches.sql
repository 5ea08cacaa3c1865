-- How many batches purge/batches.sql would delete with cutoff $1 (timestamptz): those
-- finished before it.
SELECT count(*) FROM idem_batch WHERE state = 'finished' AND finished_at < $1
