-- Marks dead job ?1 as awaiting intent ?2 (its call's outcome is unknown): the
-- resolution of that intent puts it back to run (put_back.sql); awaited_intent keeps the
-- key after that. Run in the transaction
-- that wrote it dead.
UPDATE idem_job SET awaits_intent = ?2, awaited_intent = ?2 WHERE id = ?1 AND state = 'dead'
