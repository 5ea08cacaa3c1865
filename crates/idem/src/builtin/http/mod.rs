//! The built-in `http` job kind: one call to another service, made through an intent.
//!
//! It sends `Idempotency-Key: <key>`, where the key is `http:key:{queue}:{enqueue_key}`
//! for a job enqueued with a key and `http:job:{id}` otherwise: the same on every attempt,
//! and on every retry, since it comes from the job's own row.
//! A keyed remote (`keyed: true`, the default) applies the key once, so an attempt whose
//! outcome is unclear is simply sent again with the same key. An unkeyed one
//! (`keyed: false`) is never sent again blindly: an unclear outcome marks the intent
//! `unknown`, the job stops, and reconciliation looks the call up at `lookup_url`.

mod args;
mod outcome;

use std::time::Duration;

use idem_store::IntentRow;
use serde_json::json;

pub use args::HttpArgs;
use args::Request;
use outcome::Class;

use crate::context::JobContext;
use crate::effect::EffectKey;
use crate::error::{IdemError, JobError};
use crate::handler::{EffectClass, Handler};
use crate::intent::{Intent, IntentGuard, IntentPolicy, Lookup, awaiting_reconciliation};

/// How the `http` kind calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// The longest a call may take; a job's `timeout_ms` may only be shorter (default
    /// 30 s).
    pub call_timeout: Duration,
    /// The lease of each call's intent; must exceed `call_timeout` (default 60 s).
    pub lease: Duration,
    /// How much of a response body is kept in the intent's result (default 4 KiB).
    pub body_excerpt: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            call_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            body_excerpt: 4096,
        }
    }
}

/// The `http` job kind's handler.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    config: HttpConfig,
}

impl Http {
    /// A handler with `config`; refuses a lease that does not exceed the call timeout.
    pub fn new(config: HttpConfig) -> Result<Http, IdemError> {
        let http = Http {
            client: client()?,
            config,
        };
        http.intent_policy().check(<Http as Handler>::KIND)?;
        Ok(http)
    }

    /// The intent's key, fixed for the job's whole life: `http:key:{queue}:{enqueue_key}`
    /// for a job enqueued with a key (the key it was enqueued with, kept on its row), else
    /// `http:job:{id}`. The two forms have different numbers of parts (a `:` inside a
    /// part is escaped), so they never meet. An enqueue key that cannot be a key's part
    /// (spaces, too long) is named by its SHA-256: `http:key-sha256:{queue}:{hex}`.
    fn key(job: &idem_store::JobRow) -> EffectKey {
        let Some(enqueue_key) = &job.enqueue_key else {
            return EffectKey::new("http").part("job").part(job.id);
        };
        let plain = EffectKey::new("http")
            .part("key")
            .part(&job.queue)
            .part(enqueue_key);
        if plain.render().is_ok() {
            return plain;
        }
        let hex = crate::intent::sha256_hex(enqueue_key.as_bytes());
        EffectKey::new("http")
            .part("key-sha256")
            .part(&job.queue)
            .part(hex)
    }

    /// Sends the request with the intent's key; the response status and a bounded
    /// excerpt of its body, or the error.
    async fn call(&self, r: &Request, key: &str) -> Result<(u16, String), reqwest::Error> {
        let mut req = self
            .client
            .request(r.method.clone(), r.url.clone())
            .headers(r.headers.clone())
            .header("Idempotency-Key", key)
            .timeout(r.timeout);
        if let Some(body) = &r.body {
            req = req.json(body);
        }
        let mut resp = req.send().await?;
        let status = resp.status().as_u16();
        // The status decides the outcome; the body is only an excerpt to keep, read up to
        // its bound, and a failure reading it changes nothing about a call answered.
        let mut body = Vec::new();
        while body.len() < self.config.body_excerpt {
            match resp.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(self.config.body_excerpt);
        Ok((status, excerpt(&body)))
    }

    /// Records what the answer means on the intent, and what the job does next.
    async fn settle(
        &self,
        guard: IntentGuard,
        keyed: bool,
        answer: Result<(u16, String), reqwest::Error>,
    ) -> Result<(), JobError> {
        let (class, what) = match &answer {
            Ok((status, _)) => (outcome::of_status(*status), format!("HTTP {status}")),
            Err(e) => (outcome::of_error(e), format!("{e}")),
        };
        match class {
            Class::Applied => {
                let (status, excerpt) = answer.expect("an applied call has a response");
                let refs = remote_id(&excerpt).into_iter().collect();
                let result = json!({"status": status, "body": excerpt});
                guard.complete(result, refs).await?;
                Ok(())
            }
            Class::Refused => {
                guard
                    .fail(format!("the remote refused the call: {what}"))
                    .await?;
                Err(JobError::permanent(format!(
                    "the remote refused the call: {what}"
                )))
            }
            Class::NotApplied | Class::NeverLeft => {
                guard.release().await?;
                Err(JobError::retry(format!("the call was not applied: {what}")))
            }
            // The same key makes a re-send safe at a keyed remote.
            Class::Ambiguous if keyed => {
                guard.release().await?;
                Err(JobError::retry(format!(
                    "the call may have been applied ({what}); it is sent again with the same key"
                )))
            }
            Class::Ambiguous => {
                let row = guard.unknown(what).await?;
                Err(awaiting_reconciliation(&row))
            }
        }
    }
}

/// A client that follows no redirects (a redirect could re-send a body elsewhere) and
/// uses no proxy from the environment.
fn client() -> Result<reqwest::Client, IdemError> {
    // reqwest is built without a crypto provider; ring is the one sqlx already uses.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| IdemError::Config(format!("the HTTP client cannot be built: {e}")))
}

/// A body's bytes as text the store can keep: invalid UTF-8 and NUL (which PostgreSQL's
/// `jsonb` refuses) become U+FFFD, so an applied call's outcome can always be recorded.
fn excerpt(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace('\0', "\u{FFFD}")
}

/// The remote's id for the effect: an `id` string field of a JSON response.
fn remote_id(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get("id")?.as_str().map(str::to_owned)
}

impl Handler for Http {
    const KIND: &'static str = "http";
    const EFFECT: EffectClass = EffectClass::KeyedRemote;
    type Args = HttpArgs;

    async fn run(&self, cx: &mut JobContext, args: HttpArgs) -> Result<(), JobError> {
        let request = args
            .validate(self.config.call_timeout)
            .map_err(|e| JobError::permanent(format!("http job args: {e}")))?;
        let class = match request.keyed {
            true => EffectClass::KeyedRemote,
            false => EffectClass::UnkeyedRemote,
        };
        let key = Self::key(cx.job());
        let guard = match cx.intent_as(class, &key, &args.fingerprinted()).await? {
            Intent::Begun(guard) => guard,
            Intent::Completed(_) => return Ok(()),
            other => return Err(other.wait().expect("only Begun and Completed go on")),
        };
        let answer = match guard.send(self.call(&request, guard.key())).await {
            Ok(answer) => answer,
            Err(lost) => return Err(abandoned(guard, request.keyed, lost).await),
        };
        self.settle(guard, request.keyed, answer).await
    }

    fn intent_policy(&self) -> IntentPolicy {
        IntentPolicy {
            lease: self.config.lease,
            call_timeout: self.config.call_timeout,
            client_retries: 0,
            client_backoff: Duration::ZERO,
        }
    }

    async fn lookup(&self, intent: &IntentRow, args: HttpArgs) -> Lookup {
        let Some(mut url) = args
            .lookup_url
            .as_deref()
            .and_then(|u| reqwest::Url::parse(u).ok())
        else {
            return Lookup::CannotTell(format!(
                "http job of intent {:?} has no valid lookup_url to look the call up",
                intent.key
            ));
        };
        url.query_pairs_mut().append_pair("reference", &intent.key);
        let found = self
            .client
            .get(url.clone())
            .timeout(self.config.call_timeout)
            .send()
            .await;
        let resp = match found {
            Ok(resp) => resp,
            Err(e) => return Lookup::CannotTell(format!("lookup at {url} failed: {e}")),
        };
        match resp.status().as_u16() {
            404 => Lookup::Absent,
            200 => match resp.json::<serde_json::Value>().await {
                Ok(body) => match body.get("ids").and_then(|ids| ids.as_array()) {
                    Some(ids) => Lookup::of_copies(
                        ids.iter()
                            .filter_map(|i| i.as_str().map(str::to_owned))
                            .collect(),
                    ),
                    None => Lookup::CannotTell(format!(
                        "lookup at {url} answered 200 without an `ids` array"
                    )),
                },
                Err(e) => Lookup::CannotTell(format!("lookup at {url} answered 200: {e}")),
            },
            status => Lookup::CannotTell(format!("lookup at {url} answered HTTP {status}")),
        }
    }
}

/// The call was abandoned (its intent taken over, or its lease about to lapse): it may
/// have been applied. Record that if the intent is still this attempt's; else the
/// next attempt's takeover decides.
async fn abandoned(guard: IntentGuard, keyed: bool, why: IdemError) -> JobError {
    let recorded = match keyed {
        true => guard.release().await.map(|_| None),
        false => guard.unknown(why.to_string()).await.map(Some),
    };
    match recorded {
        Ok(Some(row)) => awaiting_reconciliation(&row),
        _ => JobError::retry(format!("the call was abandoned: {why}")),
    }
}
