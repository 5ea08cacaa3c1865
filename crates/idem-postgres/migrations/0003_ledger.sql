-- 0003_ledger: ledger facts and running totals.
-- An entry is immutable and keyed by the identity of the event it records; the running
-- total of its account moves in the same transaction as its insert. Entries are effect
-- data: idem never purges them.
CREATE TABLE idem_ledger_entry (
    entry_key  text        PRIMARY KEY CHECK (length(entry_key) BETWEEN 1 AND 512),
    account    text        NOT NULL CHECK (length(account) BETWEEN 1 AND 255),
    amount     bigint      NOT NULL,
    job_id     bigint      NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE INDEX idem_ledger_entry_account ON idem_ledger_entry (account);

CREATE TABLE idem_ledger_balance (
    account    text        PRIMARY KEY,
    balance    bigint      NOT NULL,
    updated_at timestamptz NOT NULL
);
