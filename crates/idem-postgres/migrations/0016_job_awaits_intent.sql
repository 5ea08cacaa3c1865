-- 0016_job_awaits_intent: the intent a job last stopped to await (its call's outcome was
-- unknown), so that the resolution of that intent, and only it, puts the job back to run
-- when it is dead, and the intent purge keeps that intent's outcome while the job may
-- still run. NULL for a job that never awaited one. The partial index finds a
-- resolution's waiting jobs without reading the job table.
ALTER TABLE idem_job ADD COLUMN awaits_intent TEXT;
CREATE INDEX idem_job_awaits_intent ON idem_job (awaits_intent) WHERE awaits_intent IS NOT NULL;
