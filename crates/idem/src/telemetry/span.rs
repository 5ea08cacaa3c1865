//! The span of one job attempt, `idem.job`: the handler's future and the attempt's final
//! write run inside it, so the store's own spans and events (the SQLite writer's
//! `idem_sqlite.write` and `idem_sqlite.read`, sqlx's `sqlx::query`) and the handler's logs nest under it.
//!
//! It carries the job's `job_id`, `kind`, `queue`, `attempt` and `fence`, the
//! OpenTelemetry messaging attributes (`messaging.system = "idem"`,
//! `messaging.destination.name` = the queue, `messaging.operation.type = "process"`,
//! `messaging.message.id` = the job id), `otel.name`/`otel.kind` for exporters built on
//! `tracing-opentelemetry`, and, once the attempt ends, its `outcome`. With the `otel`
//! feature it is linked to the producer's span, whose `traceparent` the job kept
//! (`otel.rs`).
//!
//! What must stay true: a span is created for every attempt this process runs, and it
//! costs no more than a disabled callsite when no subscriber wants it.

use idem_store::JobRow;
use tracing::Span;
use tracing::field::Empty;

use super::metrics::Outcome;

/// The name of the span of one job attempt.
pub const ATTEMPT_SPAN: &str = "idem.job";

/// The span of `job`'s attempt, just claimed (not entered).
pub(crate) fn attempt(job: &JobRow) -> Span {
    let span = tracing::info_span!(
        "idem.job",
        otel.name = format!("process {}", job.queue),
        otel.kind = "consumer",
        job_id = job.id,
        kind = %job.kind,
        queue = %job.queue,
        attempt = job.attempt,
        fence = job.fence,
        messaging.system = "idem",
        messaging.destination.name = %job.queue,
        messaging.operation.type = "process",
        messaging.message.id = job.id,
        outcome = Empty,
    );
    #[cfg(feature = "otel")]
    if let Some(traceparent) = &job.trace_parent {
        super::otel::link(&span, traceparent);
    }
    span
}

/// Records how the attempt of `span` ended.
pub(crate) fn ended(span: &Span, outcome: Outcome) {
    span.record("outcome", outcome.as_str());
}

/// The current span's trace context as a W3C `traceparent`, kept with a job enqueued now;
/// `None` without the `otel` feature or an OpenTelemetry context.
pub(crate) fn current_traceparent() -> Option<String> {
    #[cfg(feature = "otel")]
    return super::otel::current_traceparent();
    #[cfg(not(feature = "otel"))]
    None
}
