//! The span of each job attempt, seen by a tracing layer of the test's own, on both
//! stores: one `idem.job` span per attempt with the job's id, kind, queue, attempt, fence,
//! the messaging attributes and the outcome, and the store's work nested inside it (the
//! SQLite writer's spans, sqlx's statement events on PostgreSQL).
//!
//! A subscriber is global per process (the writer thread and the runtime's threads must
//! see it), so every test of this binary shares one collector and reads only the spans of
//! its own queue.

mod common;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{client, events, immediate_retries};
use idem::{EffectClass, Handler, Job, JobContext, JobError};
use idem_store_tests::TestDb;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One attempt span: its fields, and the store work seen inside it.
#[derive(Debug, Clone, Default)]
struct Attempt {
    fields: BTreeMap<String, String>,
    /// Names of spans and targets of events of the store nested under it.
    store_work: Vec<String>,
}

/// Every attempt span seen, in the order they were created.
fn attempts() -> &'static Mutex<Vec<Attempt>> {
    static SEEN: OnceLock<Mutex<Vec<Attempt>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

/// The index of an attempt span in [`attempts`], kept in its extensions.
struct AttemptIndex(usize);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

/// Collects attempt spans and the store's spans and events under them.
struct Collector;

impl Collector {
    /// The attempt span in `scope` (the span itself or an ancestor), if any.
    fn attempt_in<'a, S: Subscriber + for<'l> LookupSpan<'l>>(
        scope: impl Iterator<Item = tracing_subscriber::registry::SpanRef<'a, S>>,
    ) -> Option<usize> {
        for span in scope {
            if let Some(i) = span.extensions().get::<AttemptIndex>() {
                return Some(i.0);
            }
        }
        None
    }

    fn note(index: Option<usize>, what: &str) {
        let is_store = what.starts_with("idem_sqlite") || what.starts_with("sqlx");
        if let (Some(i), true) = (index, is_store) {
            attempts().lock().unwrap()[i]
                .store_work
                .push(what.to_owned());
        }
    }
}

impl<S: Subscriber + for<'l> LookupSpan<'l>> Layer<S> for Collector {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a new span is known");
        if attrs.metadata().name() == idem::telemetry::span::ATTEMPT_SPAN {
            let mut attempt = Attempt::default();
            attrs.record(&mut Fields(&mut attempt.fields));
            let mut seen = attempts().lock().unwrap();
            seen.push(attempt);
            span.extensions_mut().insert(AttemptIndex(seen.len() - 1));
            return;
        }
        let index = span.parent().and_then(|p| Self::attempt_in(p.scope()));
        Self::note(index, attrs.metadata().name());
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span is known");
        if let Some(i) = span.extensions().get::<AttemptIndex>() {
            values.record(&mut Fields(&mut attempts().lock().unwrap()[i.0].fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let index = ctx.event_scope(event).and_then(|s| Self::attempt_in(s));
        Self::note(index, event.metadata().target());
    }
}

/// Installs the collector as the process's subscriber (once).
fn collect() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(Collector);
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
}

/// Fails its first attempt (retried at once) and completes the second in its effect
/// transaction, so both attempts write to the store from inside their span.
struct Twice {
    ran: tokio::sync::mpsc::UnboundedSender<i32>,
}

impl Handler for Twice {
    const KIND: &'static str = "twice";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _args: serde_json::Value) -> Result<(), JobError> {
        let attempt = cx.job().attempt;
        let _ = self.ran.send(attempt);
        if attempt == 1 {
            return Err(JobError::retry("first attempt fails"));
        }
        let tx = cx.begin().await?;
        tx.complete().await?;
        Ok(())
    }
}

/// Each attempt has one span with its fields and the store's work nested inside it.
async fn each_attempt_has_a_span_with_the_store_inside(db: &TestDb) {
    collect();
    let queue = format!("trace-{:?}", db.store.backend());
    let idem = client(db, None);
    let job = idem
        .enqueue(Job::new("twice", serde_json::json!({})).queue(&queue))
        .await
        .unwrap()
        .job;
    let (ran, mut runs) = events();
    let mut worker = idem.worker(immediate_retries(&queue, 1)).unwrap();
    worker.register(Twice { ran }).unwrap();
    let running = worker.start();
    for expected in [1, 2] {
        let attempt = tokio::time::timeout(Duration::from_secs(30), runs.recv()).await;
        assert_eq!(attempt.expect("the attempt runs"), Some(expected));
    }
    running.shutdown().await;

    let mine: Vec<Attempt> = attempts()
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.fields.get("queue") == Some(&queue))
        .cloned()
        .collect();
    assert_eq!(mine.len(), 2, "one span per attempt: {mine:#?}");
    for (a, (n, outcome)) in mine.iter().zip([(1, "retried"), (2, "completed")]) {
        let field = |name: &str| a.fields.get(name).map(String::as_str);
        let (id, n) = (job.id.to_string(), n.to_string());
        assert_eq!(field("job_id"), Some(id.as_str()), "{a:#?}");
        assert_eq!(field("kind"), Some("twice"));
        assert_eq!(field("attempt"), Some(n.as_str()));
        assert_eq!(field("fence"), Some(n.as_str()), "a claim per attempt");
        assert_eq!(field("outcome"), Some(outcome));
        assert_eq!(field("messaging.system"), Some("idem"));
        assert_eq!(field("messaging.destination.name"), Some(queue.as_str()));
        assert_eq!(field("messaging.operation.type"), Some("process"));
        assert!(
            !a.store_work.is_empty(),
            "the store's work nests inside: {a:#?}"
        );
    }
}

idem_store_tests::store_cases!(each_attempt_has_a_span_with_the_store_inside);
