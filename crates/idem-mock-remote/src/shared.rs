//! The state the server's handlers and the test's [`MockRemote`](crate::MockRemote) share.
//!
//! Plain data sits behind short-lived `std` mutexes (never held across an `.await`);
//! everything a test awaits is a `watch` channel, so waits are signals, not sleeps. The
//! journal, when there is one, is written only under the ledger's lock.

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::fault::{Fault, FaultQueue};
use crate::gate::{Gate, until};
use crate::journal::{Journal, JournalEntry};
use crate::ledger::{Ledger, Mode, Outcome};
use crate::log::LogEntry;

/// Everything one remote knows, behind an `Arc`.
#[derive(Debug)]
pub(crate) struct Shared {
    ledger: Mutex<Ledger>,
    journal: Option<Journal>,
    faults: Mutex<FaultQueue>,
    log: Mutex<Vec<LogEntry>>,
    arrivals: watch::Sender<usize>,
    applied: watch::Sender<usize>,
    shutdown: watch::Sender<bool>,
    pub(crate) gate: Gate,
}

impl Shared {
    pub(crate) fn new(mode: Mode, journal: Option<Journal>) -> Self {
        Shared {
            ledger: Mutex::new(Ledger::new(mode)),
            journal,
            faults: Mutex::default(),
            log: Mutex::default(),
            arrivals: watch::Sender::new(0),
            applied: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
            gate: Gate::new(),
        }
    }

    /// Counts one request as arrived.
    pub(crate) fn arrive(&self) {
        self.arrivals.send_modify(|n| *n += 1);
    }

    /// Replays the key's copy, or journals and applies a new one and signals the new
    /// total. A journal that cannot be written is an error, and nothing is applied.
    pub(crate) fn apply(&self, key: Option<&str>, body: &serde_json::Value) -> io::Result<Outcome> {
        let mut ledger = lock(&self.ledger);
        if let Some(replayed) = ledger.replay(key) {
            return Ok(replayed);
        }
        if let Some(journal) = &self.journal {
            journal.append(&JournalEntry {
                key: key.map(str::to_owned),
                copy: ledger.next_id(),
                body: body.clone(),
            })?;
        }
        let outcome = ledger.add(key);
        self.applied.send_replace(ledger.applied_total());
        Ok(outcome)
    }

    pub(crate) fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    pub(crate) fn inject(&self, fault: Fault) {
        lock(&self.faults).push(fault);
    }

    pub(crate) fn record(&self, entry: LogEntry) {
        lock(&self.log).push(entry);
    }

    pub(crate) fn log(&self) -> Vec<LogEntry> {
        lock(&self.log).clone()
    }

    pub(crate) fn take_apply_fault(&self) -> Option<Fault> {
        lock(&self.faults).take_apply()
    }

    pub(crate) fn take_lookup_fault(&self) -> Option<Fault> {
        lock(&self.faults).take_lookup()
    }

    pub(crate) fn requests_total(&self) -> usize {
        *self.arrivals.borrow()
    }

    pub(crate) async fn wait_for_requests(&self, n: usize) {
        until(&mut self.arrivals.subscribe(), |a| *a >= n).await;
    }

    pub(crate) async fn wait_for_applied(&self, n: usize) {
        until(&mut self.applied.subscribe(), |a| *a >= n).await;
    }

    /// Tells the server and every waiting request to stop.
    pub(crate) fn stop(&self) {
        self.shutdown.send_replace(true);
    }

    /// Resolves once [`Shared::stop`] was called.
    pub(crate) async fn stopped(&self) {
        until(&mut self.shutdown.subscribe(), |s| *s).await;
    }
}

/// Locks `m`; a panic elsewhere leaves only plain data behind, still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
