//! With the `otel` feature, on both stores: the producer's trace context travels with its
//! job (a W3C `traceparent` in `idem_job.trace_parent`) and the worker's attempt span,
//! exported through `tracing-opentelemetry`, is linked to the producer's span.
//!
//! `cargo test -p idem --features otel --test otel`. The subscriber is global per process,
//! so the exporter collects every test's spans and each test reads its own queue's.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{client, config, events};
use idem::{EffectClass, Handler, Job, JobContext, JobError};
use idem_store_tests::TestDb;
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// An exporter that keeps what it is given.
#[derive(Debug, Clone, Default)]
struct Kept(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Kept {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(batch);
        Ok(())
    }
}

/// The process's tracer provider and what its exporter kept (installed once).
fn exported() -> &'static (SdkTracerProvider, Kept) {
    static INSTALLED: OnceLock<(SdkTracerProvider, Kept)> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("idem-test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
        (provider, kept)
    })
}

/// Completes its job and tells the test.
struct Traced {
    ran: tokio::sync::mpsc::UnboundedSender<()>,
}

impl Handler for Traced {
    const KIND: &'static str = "traced";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _cx: &mut JobContext, _args: serde_json::Value) -> Result<(), JobError> {
        let _ = self.ran.send(());
        Ok(())
    }
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

/// The traceparent the producer's span had is kept with the job, and the attempt's span
/// links to that span.
async fn the_attempt_span_links_to_the_producer(db: &TestDb) {
    let (provider, kept) = exported();
    let queue = format!("otel-{:?}", db.store.backend());
    let idem = client(db, None);
    let producer = tracing::info_span!("producer");
    let job = Job::new("traced", serde_json::json!({})).queue(&queue);
    let enqueued = async { idem.enqueue(job).await.unwrap() }
        .instrument(producer.clone())
        .await;
    let sent = producer.context().span().span_context().clone();
    assert!(sent.is_valid(), "the producer's span has a context");
    let traceparent = format!("00-{}-{}-01", sent.trace_id(), sent.span_id());
    assert_eq!(
        enqueued.job.trace_parent.as_deref(),
        Some(traceparent.as_str())
    );
    let stored = idem.job(enqueued.job.id).await.unwrap().unwrap();
    assert_eq!(stored.trace_parent.as_deref(), Some(traceparent.as_str()));

    let (ran, mut runs) = events();
    let mut worker = idem.worker(config(&queue, 1)).unwrap();
    worker.register(Traced { ran }).unwrap();
    let running = worker.start();
    let done = tokio::time::timeout(Duration::from_secs(30), runs.recv()).await;
    assert_eq!(done.expect("the job runs"), Some(()));
    running.shutdown().await;
    provider.force_flush().unwrap();

    let spans = kept.0.lock().unwrap_or_else(|e| e.into_inner());
    let attempt: Vec<&SpanData> = spans
        .iter()
        .filter(|s| attribute(s, "messaging.destination.name") == Some(&Value::from(queue.clone())))
        .collect();
    let names: Vec<_> = spans.iter().map(|s| &s.name).collect();
    assert_eq!(attempt.len(), 1, "one attempt span among {names:?}");
    let attempt = attempt[0];
    assert_eq!(attempt.name, format!("process {queue}"));
    let ids = |c: &opentelemetry::trace::SpanContext| (c.trace_id(), c.span_id());
    let linked: Vec<_> = attempt
        .links
        .links
        .iter()
        .map(|l| ids(&l.span_context))
        .collect();
    assert_eq!(
        linked,
        [ids(&sent)],
        "the attempt links to the producer's span"
    );
}

idem_store_tests::store_cases!(the_attempt_span_links_to_the_producer);
