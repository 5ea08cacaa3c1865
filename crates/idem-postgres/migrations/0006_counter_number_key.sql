-- 0006_counter_number_key: a number belongs to (effect key, counter), not to the key
-- alone, so one effect key may hold a number on each of several counters (an invoice
-- number and a receipt number for the same order). Lookups were already by both.
ALTER TABLE idem_counter_number DROP CONSTRAINT idem_counter_number_pkey;
ALTER TABLE idem_counter_number ADD PRIMARY KEY (key, counter);
