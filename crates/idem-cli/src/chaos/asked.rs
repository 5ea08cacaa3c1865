//! The producer's log: an append-only file of JSON lines, one per request the producer
//! made, written after the request's enqueue committed and synced to disk chunk by
//! chunk. The checker reads it as the record of what was asked for, which the database
//! cannot rewrite: a job whose row vanished is still in the log.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One request. `req` is the producer's own id of it; `job` the id the store gave.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "kebab-case")]
pub(super) enum Asked {
    /// A receipt mail for `order` (several requests may name one order).
    Mail { req: u64, job: i64, order: i64 },
    /// A ledger transfer (several requests may carry one transfer `id`).
    Transfer {
        req: u64,
        job: i64,
        id: i64,
        from: String,
        to: String,
        amount: i64,
    },
    /// A note fenced by its claim alone.
    Note { req: u64, job: i64 },
    /// A job completed by the batched completer.
    Ping { req: u64, job: i64 },
    /// A call to the sink, keyed or not; its body carries `req`.
    Call { req: u64, job: i64, keyed: bool },
    /// The first link of a chain of `links`.
    Chain {
        req: u64,
        job: i64,
        chain: i64,
        links: i64,
    },
    /// A batch and its children, each `(job, shop, amount)`.
    Batch {
        req: u64,
        batch: i64,
        children: Vec<(i64, i64, i64)>,
    },
}

impl Asked {
    /// The jobs this request enqueued itself.
    pub(super) fn jobs(&self) -> Vec<i64> {
        match self {
            Asked::Mail { job, .. }
            | Asked::Transfer { job, .. }
            | Asked::Note { job, .. }
            | Asked::Ping { job, .. }
            | Asked::Call { job, .. }
            | Asked::Chain { job, .. } => vec![*job],
            Asked::Batch { children, .. } => children.iter().map(|c| c.0).collect(),
        }
    }
}

/// The log, open for appending.
pub(super) struct AskedLog {
    file: File,
}

impl AskedLog {
    pub(super) fn create(path: &Path) -> anyhow::Result<AskedLog> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot create the producer's log {}", path.display()))?;
        Ok(AskedLog { file })
    }

    /// Appends the requests of one committed enqueue and syncs them to disk.
    pub(super) fn append(&mut self, asked: &[Asked]) -> anyhow::Result<()> {
        let mut lines = Vec::new();
        for a in asked {
            serde_json::to_writer(&mut lines, a)?;
            lines.push(b'\n');
        }
        self.file.write_all(&lines)?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// Reads the log back. A last line cut short (no newline) is left out; any other line
/// that does not parse is an error.
pub(super) fn read(path: &Path) -> anyhow::Result<Vec<Asked>> {
    let file = File::open(path)
        .with_context(|| format!("cannot read the producer's log {}", path.display()))?;
    let mut asked = Vec::new();
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    for n in 1.. {
        line.clear();
        if reader.read_line(&mut line)? == 0 || !line.ends_with('\n') {
            break;
        }
        let a = serde_json::from_str(line.trim_end())
            .with_context(|| format!("line {n} of {} is not a request", path.display()))?;
        asked.push(a);
    }
    Ok(asked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_left_out_and_a_corrupt_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("asked.jsonl");
        let mut log = AskedLog::create(&path).unwrap();
        log.append(&[
            Asked::Note { req: 1, job: 10 },
            Asked::Ping { req: 2, job: 11 },
        ])
        .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"class\":\"note\",\"re")
            .unwrap();
        let read_back = read(&path).unwrap();
        assert_eq!(read_back.len(), 2);
        assert_eq!(read_back[1].jobs(), [11]);
        std::fs::write(&path, "{\"class\":\"note\"}\n{}\n").unwrap();
        assert!(read(&path).is_err());
        assert!(AskedLog::create(&path).is_err(), "the log is never reused");
    }
}
