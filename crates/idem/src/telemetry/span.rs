//! The span of one job attempt, `idem.job`: the handler's future and the attempt's final
//! write run inside it, so the store's own spans and events (the SQLite writer's
//! `idem_sqlite.write` and `idem_sqlite.read`, sqlx's `sqlx::query`) and the handler's logs nest under it.
//!
//! It carries the job's `job_id`, `kind`, `queue`, `attempt` and `fence`, the
//! OpenTelemetry messaging attributes (`messaging.system = "idem"`,
//! `messaging.destination.name` = the queue, `messaging.operation.type = "process"`,
//! `messaging.message.id` = the job id), `otel.name`/`otel.kind` for exporters built on
//! `tracing-opentelemetry`, and, once the attempt ends, its `outcome`.
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
    tracing::info_span!(
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
    )
}

/// Records how the attempt of `span` ended.
pub(crate) fn ended(span: &Span, outcome: Outcome) {
    span.record("outcome", outcome.as_str());
}
