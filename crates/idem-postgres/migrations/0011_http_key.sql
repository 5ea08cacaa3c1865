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
-- PostgreSQL dialect: adding a nullable column without a default rewrites no rows.
ALTER TABLE idem_job ADD COLUMN principal text
    CHECK (principal IS NULL OR length(principal) BETWEEN 1 AND 128);

CREATE TABLE idem_http_key (
    principal    text        NOT NULL CHECK (length(principal) BETWEEN 1 AND 128),
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint  text        NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
    state        text        NOT NULL CHECK (state IN ('in_progress', 'completed',
                                                       'released')),
    fence        bigint      NOT NULL,
    locked_until timestamptz NOT NULL,
    status       integer,
    headers      jsonb,
    body         bytea,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (principal, key),
    CHECK ((state = 'completed')
           = (status IS NOT NULL AND headers IS NOT NULL AND body IS NOT NULL))
);

CREATE INDEX idem_http_key_created ON idem_http_key (created_at);
