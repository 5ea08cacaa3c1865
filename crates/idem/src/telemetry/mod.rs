//! What idem tells operators about its work, beside its logs: metrics through the
//! `metrics` facade (`metrics.rs`: every name, and the one function that records each),
//! the store's counts kept as cached gauges (`refresh.rs`: read on an interval in the
//! background, never per scrape), the per-client counters [`crate::Idem::metrics`] returns
//! (`counters.rs`), and a tracing span per job attempt that carries the producer's trace
//! context (`span.rs`).
//!
//! What must stay true: recording is cheap and never fails a job (with no recorder
//! installed the facade drops every value); each outcome is recorded once, by the step
//! that decided it, so a counter equals what the database recorded; no count reads the
//! job table when Prometheus scrapes.

mod counters;
pub mod metrics;
#[cfg(feature = "otel")]
mod otel;
mod refresh;
pub mod span;

pub(crate) use counters::Metrics;
pub use counters::MetricsSnapshot;
pub use refresh::{DEFAULT_GAUGE_INTERVAL, GaugeRefresh};
