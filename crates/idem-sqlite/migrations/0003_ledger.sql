-- 0003_ledger: ledger facts and running totals.
-- An entry is immutable and keyed by the identity of the event it records; the running
-- total of its account moves in the same transaction as its insert. Entries are effect
-- data: idem never purges them.
-- SQLite dialect: created_at and updated_at are INTEGER milliseconds since the Unix epoch.
CREATE TABLE idem_ledger_entry (
    entry_key  TEXT    PRIMARY KEY CHECK (length(entry_key) BETWEEN 1 AND 512),
    account    TEXT    NOT NULL CHECK (length(account) BETWEEN 1 AND 255),
    amount     INTEGER NOT NULL,
    job_id     INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX idem_ledger_entry_account ON idem_ledger_entry (account);

CREATE TABLE idem_ledger_balance (
    account    TEXT    PRIMARY KEY,
    balance    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
