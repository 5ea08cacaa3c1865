//! [`MockRemote`]: the test's handle on one running remote.
//!
//! It owns the server task and reads the shared state; dropping it stops the server, so a
//! remote never outlives its test.

use std::io;
use std::net::{Ipv4Addr, TcpListener as StdListener};
use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::fault::Fault;
use crate::journal::Journal;
use crate::ledger::Mode;
use crate::log::LogEntry;
use crate::server;
use crate::shared::Shared;

/// A mock remote service listening on `127.0.0.1` on a port of its own.
///
/// Stops when dropped (or with [`MockRemote::shutdown`]).
#[derive(Debug)]
pub struct MockRemote {
    url: String,
    shared: Arc<Shared>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl MockRemote {
    /// Binds `127.0.0.1:0` and starts serving in `mode`.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the server runs as a task on the caller's runtime).
    pub fn start(mode: Mode) -> io::Result<MockRemote> {
        Self::serve(mode, None)
    }

    /// Like [`MockRemote::start`], and appends one line per applied copy to the journal
    /// at `path` (created if missing; lines already there are kept), before answering.
    /// Read it back with [`read_journal`](crate::read_journal).
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn start_journaled(mode: Mode, path: &Path) -> io::Result<MockRemote> {
        Self::serve(mode, Some(Journal::open(path)?))
    }

    fn serve(mode: Mode, journal: Option<Journal>) -> io::Result<MockRemote> {
        let std_listener = StdListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(std_listener)?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::new(mode, journal));
        let task = Some(server::spawn(listener, Arc::clone(&shared)));
        Ok(MockRemote { url, shared, task })
    }

    /// The base URL, `http://127.0.0.1:PORT`; the routes are under `/effects`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server and waits until it has closed every connection; requests still
    /// hung, gated or delayed are answered `503`.
    pub async fn shutdown(mut self) {
        self.shared.stop();
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }

    /// Queues `fault` for the next matching request, behind faults queued before it.
    ///
    /// # Panics
    /// When the fault names a status outside `200..=599`.
    pub fn inject(&self, fault: Fault) {
        if let Some(status) = fault.status() {
            assert!(
                (200..=599).contains(&status),
                "{fault:?}: status outside 200..=599"
            );
        }
        self.shared.inject(fault);
    }

    /// Holds the gate: applies arriving from now on wait until [`MockRemote::release`].
    /// Lookups are still answered.
    pub fn hold(&self) {
        self.shared.gate.hold();
    }

    /// Opens the gate: every waiting apply goes on, in no guaranteed order.
    pub fn release(&self) {
        self.shared.gate.release();
    }

    /// Resolves once at least `n` applies are waiting at the held gate.
    pub async fn wait_for_waiting(&self, n: usize) {
        self.shared.gate.wait_for_waiting(n).await;
    }

    /// Resolves once at least `n` requests (applies and lookups) have arrived.
    pub async fn wait_for_requests(&self, n: usize) {
        self.shared.wait_for_requests(n).await;
    }

    /// Resolves once at least `n` copies have been applied in all.
    pub async fn wait_for_applied(&self, n: usize) {
        self.shared.wait_for_applied(n).await;
    }

    /// How many requests (applies and lookups) have arrived.
    pub fn requests_total(&self) -> usize {
        self.shared.requests_total()
    }

    /// How many copies of effects were applied in all.
    pub fn applied_total(&self) -> usize {
        self.shared.ledger().applied_total()
    }

    /// How many copies were applied with this key as their reference.
    pub fn applied_for(&self, key: &str) -> usize {
        self.copies(key).len()
    }

    /// The remote ids of the copies applied with this key, oldest first.
    pub fn copies(&self, key: &str) -> Vec<String> {
        self.shared.ledger().ids_for(key)
    }

    /// Every request logged so far, in the order their outcomes were decided.
    pub fn log(&self) -> Vec<LogEntry> {
        self.shared.log()
    }
}

impl Drop for MockRemote {
    fn drop(&mut self) {
        self.shared.stop();
    }
}
