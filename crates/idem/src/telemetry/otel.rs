//! `otel` feature: the trace context that travels with a job, as a W3C `traceparent`.
//! The producer's is read from its current span (through `tracing-opentelemetry`, so only
//! when the process's subscriber has an OpenTelemetry layer) and stored with the job; each
//! attempt's span is linked to it (an OpenTelemetry link: the attempt follows from the
//! enqueue, which may have finished long before).

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

const TRACEPARENT: &str = "traceparent";

/// The current span's context as a `traceparent`; `None` when it has no valid one.
pub(crate) fn current_traceparent() -> Option<String> {
    let cx = Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Links `span` to the context `traceparent` names; a malformed one is ignored.
pub(crate) fn link(span: &Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let remote = cx.span().span_context().clone();
    if remote.is_valid() {
        span.add_link(remote);
    }
}
