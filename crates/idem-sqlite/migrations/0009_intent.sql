-- 0009_intent: intents, the two-phase records of effects that leave the store.
-- One row per logical request (the key), reserved `in_progress` with a lease and a fence
-- of its own before the call is made, and given its outcome after. The unique key is
-- the only arbiter of who holds it. A call that certainly never left keeps its row as
-- `released`, so the next holder gets a fence no earlier holder had. Completed, failed
-- and released intents are purged by created_at range once older than the retry
-- horizon; the other states wait for their holder, a reconciler or an operator.
-- SQLite dialect: times are INTEGER milliseconds, unkeyed is 0/1, result and
-- remote_refs are TEXT checked with json_valid.
CREATE TABLE idem_intent (
    key              TEXT    PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
    state            TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed',
                               'failed', 'unknown', 'duplicate', 'manual',
                                   'released')),
    fingerprint      TEXT    NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
    unkeyed          INTEGER NOT NULL CHECK (unkeyed IN (0, 1)),
    fence            INTEGER NOT NULL,
    attempt          INTEGER NOT NULL,
    lease_expires_at INTEGER,
    job_id           INTEGER NOT NULL,
    job_fence        INTEGER NOT NULL,
    result           TEXT    CHECK (result IS NULL OR json_valid(result)),
    error            TEXT,
    remote_refs      TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(remote_refs)),
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    CHECK ((state = 'in_progress') = (lease_expires_at IS NOT NULL))
) WITHOUT ROWID;

CREATE INDEX idem_intent_created ON idem_intent (created_at);
CREATE INDEX idem_intent_job ON idem_intent (job_id);
CREATE INDEX idem_intent_attention ON idem_intent (state, key)
    WHERE state IN ('unknown', 'duplicate', 'manual');
