-- 0017_job_awaited_intent: the intent a job last awaited, kept after the job is put back
-- or retried (awaits_intent, from 0016, holds it only while the job is dead awaiting it),
-- so that the intent purge keeps the outcome the job is to read while the job may still
-- run, and reconciliation can look the call up through the job. NULL for a job that
-- never awaited one.
ALTER TABLE idem_job ADD COLUMN awaited_intent TEXT;
UPDATE idem_job SET awaited_intent = awaits_intent WHERE awaits_intent IS NOT NULL;
CREATE INDEX idem_job_awaited_intent ON idem_job (awaited_intent)
    WHERE awaited_intent IS NOT NULL;
