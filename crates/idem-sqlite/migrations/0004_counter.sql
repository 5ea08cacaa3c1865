-- 0004_counter: numbers assigned by the store, tied to effect keys.
-- SQLite dialect: created_at is INTEGER milliseconds since the Unix epoch.
CREATE TABLE idem_counter (
    name  TEXT    PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 255),
    value INTEGER NOT NULL
);

CREATE TABLE idem_counter_number (
    key        TEXT    PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
    counter    TEXT    NOT NULL,
    number     INTEGER NOT NULL,
    job_id     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (counter, number)
);
