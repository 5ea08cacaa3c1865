-- 0009_intent: intents, the two-phase records of effects that leave the store.
-- One row per logical request (the key), reserved `in_progress` with a lease and a fence
-- of its own before the call is made, and given its outcome after. The unique key is
-- the only arbiter of who holds it. A call that certainly never left keeps its row as
-- `released`, so the next holder gets a fence no earlier holder had. Completed, failed
-- and released intents are purged by created_at range once older than the retry
-- horizon; the other states wait for their holder, a reconciler or an operator.
CREATE TABLE idem_intent (
    key              text        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
    state            text        NOT NULL CHECK (state IN ('in_progress', 'completed',
                                   'failed', 'unknown', 'duplicate', 'manual',
                                   'released')),
    fingerprint      text        NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
    unkeyed          boolean     NOT NULL,
    fence            bigint      NOT NULL,
    attempt          bigint      NOT NULL,
    lease_expires_at timestamptz,
    job_id           bigint      NOT NULL,
    job_fence        bigint      NOT NULL,
    result           jsonb,
    error            text,
    remote_refs      jsonb       NOT NULL DEFAULT '[]',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CHECK ((state = 'in_progress') = (lease_expires_at IS NOT NULL))
);

CREATE INDEX idem_intent_created ON idem_intent (created_at);
CREATE INDEX idem_intent_job ON idem_intent (job_id);
CREATE INDEX idem_intent_attention ON idem_intent (state, key)
    WHERE state IN ('unknown', 'duplicate', 'manual');
