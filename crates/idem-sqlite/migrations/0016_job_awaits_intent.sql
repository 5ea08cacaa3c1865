-- 0016_job_awaits_intent: the intent a dead job stopped to await (its call's outcome was
-- unknown), so that the resolution of that intent, and only it, puts the job back to run.
-- NULL for every other job; an operator's retry or the put-back clears it. The partial
-- index finds a resolution's waiting jobs without reading the job table.
ALTER TABLE idem_job ADD COLUMN awaits_intent TEXT;
CREATE INDEX idem_job_awaits_intent ON idem_job (awaits_intent) WHERE awaits_intent IS NOT NULL;
