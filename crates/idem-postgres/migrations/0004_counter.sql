-- 0004_counter: numbers assigned by the store, tied to effect keys.
CREATE TABLE idem_counter (
    name  text   PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 255),
    value bigint NOT NULL
);

CREATE TABLE idem_counter_number (
    key        text        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
    counter    text        NOT NULL,
    number     bigint      NOT NULL,
    job_id     bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (counter, number)
);
