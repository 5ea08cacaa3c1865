//! A mock remote service: "another company's API" that a job calls, on loopback HTTP.
//!
//! idem's tests, `idem demo` and chaos runs point jobs at a [`MockRemote`] and then count
//! how many times each remote effect was applied. It serves two routes:
//! - `POST /effects` (JSON body) applies an effect and answers `201 {"id", "reference"}`;
//!   in [`Mode::Keyed`] a repeated `Idempotency-Key` applies nothing and replays the stored
//!   answer with `Idempotent-Replayed: true`; in [`Mode::Unkeyed`] every request applies a
//!   new copy and the key is only recorded as the copy's `reference`.
//! - `GET /effects?reference=K` lists the ids of every copy applied with reference `K`
//!   (`404` when none): the lookup that reconciliation uses.
//!
//! [`MockRemote::start_journaled`] also appends one JSON line per applied copy to a file
//! (`{"key", "copy", "body"}`), written before the request is answered, so what the remote
//! applied survives its process; [`read_journal`] reads the file back.
//!
//! The test programs failures with [`MockRemote::inject`] (a FIFO queue of [`Fault`]s),
//! holds requests at a gate with [`MockRemote::hold`], and awaits signals
//! ([`MockRemote::wait_for_requests`], [`MockRemote::wait_for_waiting`],
//! [`MockRemote::wait_for_applied`]) instead of sleeping.
//!
//! What must stay true:
//! - an effect counts as applied exactly when the ledger records a copy, whatever answer
//!   (or silence) follows; a faulted answer never changes what a keyed replay returns;
//! - nothing waits forever past shutdown: hung, gated and delayed requests all end when
//!   the remote is dropped or shut down;
//! - a journaled remote has one line per applied copy, no more and no less: replays and
//!   lookups write none, and a copy whose line cannot be written is not applied (`500`).
//!
//! ```
//! use idem_mock_remote::{MockRemote, Mode};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let remote = MockRemote::start(Mode::Keyed)?;
//! # let _ = rustls::crypto::ring::default_provider().install_default();
//! let client = reqwest::Client::new();
//! for _ in 0..2 {
//!     client
//!         .post(format!("{}/effects", remote.url()))
//!         .header("Idempotency-Key", "order-1")
//!         .json(&serde_json::json!({ "amount": 10 }))
//!         .send()
//!         .await?;
//! }
//! assert_eq!(remote.requests_total(), 2);
//! assert_eq!(remote.applied_for("order-1"), 1);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod apply;
mod fault;
mod gate;
mod journal;
mod ledger;
mod log;
mod lookup;
mod remote;
mod server;
mod shared;

pub use fault::Fault;
pub use journal::{JournalEntry, read_journal};
pub use ledger::Mode;
pub use log::LogEntry;
pub use remote::MockRemote;
