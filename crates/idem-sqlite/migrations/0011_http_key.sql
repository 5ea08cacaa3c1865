-- 0011_http_key: inbound Idempotency-Key records, and the principal a job was enqueued
-- by.
-- idem_job.principal: the HTTP API principal that enqueued the job (NULL for jobs
-- enqueued through the library or the CLI); an API principal lists and claims only its
-- own.
-- idem_http_key: one row per (principal, key), the unique key the only arbiter of which
-- request holds it. A request reserves the key `in_progress` with fence + 1 and
-- locked_until = now + lease, and then stores its response (`completed`: status,
-- selected headers as a JSON array of [name, value] pairs, the body byte for byte) or
-- gives the key back (`released`, keeping the row so that its fence never restarts at
-- 1 while an earlier holder may still answer). Every later write of a request names the
-- fence its reservation got. Rows are purged by created_at range (the time of their
-- last reservation), whatever their state.
-- SQLite dialect: times are INTEGER milliseconds, headers TEXT checked with json_valid,
-- the body a BLOB.
ALTER TABLE idem_job ADD COLUMN principal TEXT
    CHECK (principal IS NULL OR length(principal) BETWEEN 1 AND 128);

CREATE TABLE idem_http_key (
    principal    TEXT    NOT NULL CHECK (length(principal) BETWEEN 1 AND 128),
    key          TEXT    NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint  TEXT    NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
    state        TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed', 'released')),
    fence        INTEGER NOT NULL,
    locked_until INTEGER NOT NULL,
    status       INTEGER,
    headers      TEXT    CHECK (headers IS NULL OR json_valid(headers)),
    body         BLOB,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (principal, key),
    CHECK ((state = 'completed')
           = (status IS NOT NULL AND headers IS NOT NULL AND body IS NOT NULL))
) WITHOUT ROWID;

CREATE INDEX idem_http_key_created ON idem_http_key (created_at);
