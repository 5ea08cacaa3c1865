-- 0002_effect: effect deduplication records.
-- One row per effect key, written in the transaction that makes the effect, so the key
-- and the effect commit (or roll back) together. Never the table of the effect's own
-- data. Purged by created_at range once older than the retention window.
-- SQLite dialect: created_at is INTEGER milliseconds since the Unix epoch.
CREATE TABLE idem_effect (
    key        TEXT    PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
    kind       TEXT    NOT NULL,
    job_id     INTEGER NOT NULL,
    fence      INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX idem_effect_created ON idem_effect (created_at);
CREATE INDEX idem_effect_job ON idem_effect (job_id);
