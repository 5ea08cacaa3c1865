-- 0006_counter_number_key: a number belongs to (effect key, counter), not to the key
-- alone, so one effect key may hold a number on each of several counters (an invoice
-- number and a receipt number for the same order). Lookups were already by both.
-- SQLite dialect: a primary key cannot be altered, so the table is rebuilt.
CREATE TABLE idem_counter_number_new (
    key        TEXT    NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
    counter    TEXT    NOT NULL,
    number     INTEGER NOT NULL,
    job_id     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (key, counter),
    UNIQUE (counter, number)
);
INSERT INTO idem_counter_number_new SELECT key, counter, number, job_id, created_at
FROM idem_counter_number;
DROP TABLE idem_counter_number;
ALTER TABLE idem_counter_number_new RENAME TO idem_counter_number;
