//! [`Job`]: what a producer enqueues, validated before anything is written.

use idem_store::{NewJob, Timestamp};

use crate::error::IdemError;
use crate::retry::DEFAULT_MAX_ATTEMPTS;

/// The default queue.
pub const DEFAULT_QUEUE: &str = "default";
/// The longest kind or queue name accepted.
pub const MAX_NAME_LEN: usize = 255;

/// A job to enqueue: kind, JSON args, and options.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    kind: String,
    args: serde_json::Value,
    queue: String,
    priority: i16,
    run_at: Option<Timestamp>,
    max_attempts: i32,
    enqueue_key: Option<String>,
    principal: Option<String>,
    trace_parent: Option<String>,
}

impl Job {
    /// A job of `kind` with `args`, on the default queue, priority 0, to run now.
    pub fn new(kind: impl Into<String>, args: serde_json::Value) -> Self {
        Job {
            kind: kind.into(),
            args,
            queue: DEFAULT_QUEUE.to_owned(),
            priority: 0,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            enqueue_key: None,
            principal: None,
            trace_parent: None,
        }
    }

    /// The queue to wait in.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Lower numbers are claimed first (default 0).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Not before this time (the job is `scheduled` until then).
    pub fn run_at(mut self, at: Timestamp) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Attempts allowed before the job is dead (default: the default ladder's rungs + 1).
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Makes the enqueue idempotent: while a job of the same queue with this key was
    /// enqueued inside the enqueue-key retention window, enqueueing again returns that
    /// job, marked deduplicated, and writes nothing. 1–255 printable ASCII characters;
    /// name the producer's request (`order:42:receipt`), not the attempt.
    pub fn enqueue_key(mut self, key: impl Into<String>) -> Self {
        self.enqueue_key = Some(key.into());
        self
    }

    /// Records the HTTP API principal enqueuing the job: only that principal (and
    /// operators) sees it and acts on it through the API.
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Links the job's attempts to this trace context (a W3C `traceparent`) instead of
    /// the enqueuing span's (which is kept when the `otel` feature is on and the span has
    /// an OpenTelemetry context): for a producer whose context came from elsewhere, such
    /// as the HTTP API's `traceparent` header.
    pub fn trace_parent(mut self, traceparent: impl Into<String>) -> Self {
        self.trace_parent = Some(traceparent.into());
        self
    }

    /// The kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The enqueue key, if one was set.
    pub fn key(&self) -> Option<&str> {
        self.enqueue_key.as_deref()
    }

    /// Checks the job as an enqueue would, without a database: kind and queue,
    /// `max_attempts`, the enqueue key. [`IdemError::InvalidJob`] names the field.
    ///
    /// ```
    /// let job = idem::Job::new("mail", serde_json::json!({})).max_attempts(0);
    /// assert!(job.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), IdemError> {
        check_name("kind", &self.kind)?;
        check_name("queue", &self.queue)?;
        if self.max_attempts < 1 {
            return Err(IdemError::InvalidJob(format!(
                "max_attempts is {}; it must be at least 1",
                self.max_attempts
            )));
        }
        if let Some(key) = &self.enqueue_key {
            check_text("enqueue_key", key)?;
        }
        if let Some(tp) = &self.trace_parent {
            check_name("trace_parent", tp)?;
        }
        Ok(())
    }

    /// Checks the job and turns it into the store's record.
    pub(crate) fn into_new(self) -> Result<NewJob, IdemError> {
        self.validate()?;
        Ok(NewJob {
            enqueue_key: self.enqueue_key,
            principal: self.principal,
            claim: None,
            batch_id: None,
            follows_job: None,
            follows_batch: None,
            trace_parent: self
                .trace_parent
                .or_else(crate::telemetry::span::current_traceparent),
            kind: self.kind,
            queue: self.queue,
            args: self.args,
            priority: self.priority,
            run_at: self.run_at,
            max_attempts: self.max_attempts,
        })
    }
}

/// Checks an enqueue key: 1–255 printable ASCII characters, spaces allowed.
fn check_text(field: &str, value: &str) -> Result<(), IdemError> {
    check_printable(field, value, true)
}

/// Checks a kind or queue name: 1–255 printable ASCII characters without spaces.
pub(crate) fn check_name(field: &str, value: &str) -> Result<(), IdemError> {
    check_printable(field, value, false)
}

fn check_printable(field: &str, value: &str, spaces: bool) -> Result<(), IdemError> {
    let printable = value
        .chars()
        .all(|c| c.is_ascii_graphic() || (spaces && c == ' '));
    if value.is_empty() || value.len() > MAX_NAME_LEN || !printable {
        let spaces = if spaces { "" } else { " without spaces" };
        return Err(IdemError::InvalidJob(format!(
            "{field} {value:?} is not valid: use 1 to {MAX_NAME_LEN} printable ASCII \
             characters{spaces}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(Job::new("a", serde_json::json!({})).into_new().is_ok());
        let err = Job::new("", serde_json::json!({})).into_new().unwrap_err();
        assert!(err.to_string().contains("kind \"\""), "{err}");
        let err = Job::new("k", serde_json::json!(1))
            .queue("has space")
            .into_new()
            .unwrap_err();
        assert!(err.to_string().contains("queue"), "{err}");
        let long = "x".repeat(256);
        assert!(Job::new(long, serde_json::json!(1)).into_new().is_err());
        let err = Job::new("k", serde_json::json!(1))
            .max_attempts(0)
            .into_new()
            .unwrap_err();
        assert!(err.to_string().contains("max_attempts"), "{err}");
        let err = Job::new("k", serde_json::json!(1))
            .enqueue_key("")
            .into_new()
            .unwrap_err();
        assert!(err.to_string().contains("enqueue_key"), "{err}");
        let err = Job::new("k", serde_json::json!(1))
            .enqueue_key("tab\there")
            .into_new()
            .unwrap_err();
        assert!(err.to_string().contains("enqueue_key"), "{err}");
        let ok = Job::new("k", serde_json::json!(1))
            .enqueue_key("order 42")
            .into_new()
            .unwrap();
        assert_eq!(ok.enqueue_key.as_deref(), Some("order 42"));
    }
}
