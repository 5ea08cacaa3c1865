//! idem: durable background jobs whose effects happen once.
//!
//! Delivery is at-least-once: a job is claimed under a lease and a fence, and a worker
//! that dies or stalls loses the job to another. What makes the *effect* happen once is
//! that a handler's effects commit in the transaction that also completes the job, opened
//! by [`JobContext::begin`] with a fence check first: a worker whose claim is stale cannot
//! commit anything ([`IdemError::is_lease_lost`]).
//!
//! ```no_run
//! use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, WorkerConfig};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Receipt { order_id: i64 }
//!
//! struct ReceiptMail;
//!
//! impl Handler for ReceiptMail {
//!     const KIND: &'static str = "receipt-mail";
//!     const EFFECT: EffectClass = EffectClass::Transactional;
//!     type Args = Receipt;
//!
//!     async fn run(&self, cx: &mut JobContext, args: Receipt) -> Result<(), JobError> {
//!         let mut tx = cx.begin().await?; // refused if this claim is stale
//!         tx.execute("INSERT INTO outbox (order_id) VALUES ($1)", &[args.order_id.into()])
//!             .await?;
//!         tx.complete().await?; // the outbox row and the completion commit together
//!         Ok(())
//!     }
//! }
//!
//! # async fn example() -> Result<(), idem::IdemError> {
//! let idem = Idem::connect("sqlite://idem.db").await?;
//! idem.enqueue(Job::new("receipt-mail", serde_json::json!({"order_id": 42}))).await?;
//! let mut worker = idem.worker(WorkerConfig::default())?;
//! worker.register(ReceiptMail)?;
//! let running = worker.start();
//! // … later:
//! let report = running.shutdown().await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

// The chaos-break features reach idem-store, whose `compile_error!` refuses them in a
// release build.
mod batch;
pub mod builtin;
mod client;
mod clock;
mod completer;
pub mod config;
mod context;
pub mod cron;
mod effect;
mod error;
mod handler;
pub mod intent;
mod job;
mod local;
mod maintenance;
pub mod retry;
pub mod telemetry;
mod transition;
mod wake;
mod worker;

pub use batch::{Batch, BatchStatus, MAX_CHILDREN_PER_CALL};
pub use client::{
    ConnectOptions, Idem, Tx, connect_store, connect_store_with, open_store, open_store_with,
};
pub use clock::{Clock, DatabaseClock, ManualClock};
pub use config::{
    DEFAULT_RETENTION, HORIZON_MARGIN, Horizon, HorizonParams, Retention, WindowCheck,
    retry_horizon,
};
pub use context::{EffectTx, JobContext, MAX_RESULT_BYTES};
pub use cron::Periodic;
pub use effect::EffectKey;
pub use error::{IdemError, JobError, JobErrorKind};
pub use handler::{EffectClass, Handler};
pub use idem_postgres::PgOptions;
pub use idem_sqlite::{Durability, SqliteOptions};
pub use idem_store::migration::{SchemaMigration, SchemaStatus};
pub use idem_store::{
    AttemptOutcome, AttemptRow, Backend, BatchAdded, BatchList, BatchRow, BatchState,
    CounterAssigned, EffectClaimed, EffectRecord, Enqueued, IntentList, IntentResolution,
    IntentRow, IntentState, JobList, JobRow, JobState, LeaseToken, LedgerEntry, LedgerMismatch,
    LedgerPosted, OnDead, PausedQueue, PurgeTarget, QueueCount, QueueWaiting, SqlValue, Store,
    StoreError, StoreTx, Timestamp,
};
pub use intent::{Intent, IntentGuard, IntentPolicy};
pub use job::{DEFAULT_QUEUE, Job};
pub use maintenance::{BULK_PAGE, DEFAULT_PURGE_BATCH, DeadFilter, RetryRefused};
pub use telemetry::MetricsSnapshot;
pub use transition::{Guard, Transition};
pub use worker::{
    MAX_CLAIM, MIN_LEASE_MS, POOL_SETTING, ProtocolClaim, WORKER_CONNECTIONS, Worker, WorkerConfig,
    WorkerHandle, WorkerProtocol, WorkerReport,
};
