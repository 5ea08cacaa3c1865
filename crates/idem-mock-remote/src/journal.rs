//! The journal: an append-only file with one JSON line per copy the remote applied, so
//! that what it applied outlives the remote's process (a chaos run reads it afterwards).
//!
//! What must stay true:
//! - a line is written before the ledger records its copy, under the ledger's lock, so
//!   lines never interleave and every applied copy has its line (a failed write applies
//!   nothing); replays and lookups write nothing;
//! - each line reaches the kernel (one `write_all` of the whole line) before the request
//!   is answered, so it survives the remote's process being killed (it is not fsynced: a
//!   machine crash is out of scope);
//! - [`read_journal`] ignores an incomplete last line (the writer died mid-line) and
//!   refuses any other line it cannot read.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One applied copy, as its journal line holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The request's `Idempotency-Key` (the copy's reference); `None` without one.
    pub key: Option<String>,
    /// The copy's remote id (`r-1`, `r-2`, … in order of application).
    pub copy: String,
    /// The request's JSON body (`Null` when it was empty).
    pub body: serde_json::Value,
}

/// The open journal file a remote appends to.
#[derive(Debug)]
pub(crate) struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Opens `path` for appending, creating it if needed; lines already there are kept.
    pub(crate) fn open(path: &Path) -> io::Result<Journal> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let path = path.to_owned();
        Ok(Journal { file, path })
    }

    /// Appends one line for `entry` with a single write; the error names the file.
    pub(crate) fn append(&self, entry: &JournalEntry) -> io::Result<()> {
        let mut line = serde_json::to_vec(entry)?;
        line.push(b'\n');
        let written = (&self.file).write_all(&line);
        let path = self.path.display();
        written.map_err(|e| io::Error::new(e.kind(), format!("cannot append to {path}: {e}")))
    }
}

/// Reads every complete line of the journal at `path`, oldest first.
///
/// An incomplete last line (no final newline) is ignored; an unreadable complete line is
/// an [`io::ErrorKind::InvalidData`] error naming the file and the line.
pub fn read_journal(path: &Path) -> io::Result<Vec<JournalEntry>> {
    let bytes = std::fs::read(path)?;
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // The text after the last newline: empty, or a line its writer never finished.
    lines.pop();
    let parse = |(at, line): (usize, &[u8])| {
        serde_json::from_slice(line).map_err(|e| corrupt(path, at + 1, &e))
    };
    lines.into_iter().enumerate().map(parse).collect()
}

fn corrupt(path: &Path, line: usize, e: &serde_json::Error) -> io::Error {
    let message = format!(
        "{}: line {line} is not a journal entry: {e}",
        path.display()
    );
    io::Error::new(io::ErrorKind::InvalidData, message)
}
