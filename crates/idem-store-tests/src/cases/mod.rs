//! The conformance cases, one module per area of the seam.
//!
//! Each case is a public `async fn(&TestDb)` that states one rule of the
//! [`Store`](idem_store::Store)/[`StoreTx`](idem_store::StoreTx) docs and panics when the
//! store breaks it. Cases own everything they create (the database is fresh), use
//! injected time for every time-dependent rule, and await concurrent work with signals.
//! Case names start with their area, so a list of them reads as a table of contents.

pub mod attack_pause;
pub mod batch;
pub mod batch_attack;
pub mod counter;
pub mod effect;
pub mod enqueue_key;
pub mod http_key;
pub mod intent;
pub mod intent_attack;
pub mod intent_race;
pub mod job_cancel;
pub mod job_claim;
pub mod job_dead;
pub mod job_finish;
pub mod job_insert;
pub mod job_lease;
pub mod job_read;
pub mod job_rescue;
pub mod leader;
pub mod ledger;
pub mod migrate;
pub mod principal;
pub mod purge;
pub mod queue_pause;
pub mod tx;
