-- 0008_job_snoozes: how many snoozes a job has taken since it was enqueued or last
-- retried by an operator. A snooze gives its attempt back, so without a count a handler
-- that always snoozes would never end; the engine counts a snooze beyond its
-- max_snoozes as a failed attempt, and the retry horizon counts max_snoozes snoozes.
-- A constant default is stored in the catalog (PostgreSQL 11+): no table rewrite.
ALTER TABLE idem_job ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
