//! [`HttpArgs`]: what an `http` job asks for, and its validation into a [`Request`].
//!
//! Everything is checked before an intent is reserved, so a job that cannot be sent
//! fails for good with a message naming the field, and nothing is recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde::{Deserialize, Serialize};

/// The arguments of an `http` job (DESIGN.md, "Built-in job kind `http`").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpArgs {
    /// The target, `http://` or `https://`.
    pub url: String,
    /// The method (default `POST`).
    #[serde(default)]
    pub method: Option<String>,
    /// Extra request headers. `Idempotency-Key` is idem's to set.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A JSON body.
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// The call's timeout in milliseconds (default and maximum: the kind's
    /// `call_timeout`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Whether the remote honours `Idempotency-Key` (default `true`). An unkeyed call
    /// whose outcome is unknown goes to reconciliation instead of being sent again.
    #[serde(default = "keyed_by_default")]
    pub keyed: bool,
    /// Where reconciliation looks an unkeyed call up: `GET {lookup_url}?reference={key}`
    /// answers 200 (applied; a JSON `ids` array lists the copies) or 404 (not applied).
    #[serde(default)]
    pub lookup_url: Option<String>,
}

fn keyed_by_default() -> bool {
    true
}

/// A validated request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<serde_json::Value>,
    pub(crate) timeout: Duration,
    pub(crate) keyed: bool,
}

/// What the fingerprint covers: what is sent, never when or how long to wait.
#[derive(Serialize)]
pub(crate) struct Fingerprinted<'a> {
    method: &'a str,
    url: &'a str,
    headers: &'a BTreeMap<String, String>,
    body: &'a Option<serde_json::Value>,
    keyed: bool,
}

impl HttpArgs {
    /// The parts of the request its fingerprint covers.
    pub(crate) fn fingerprinted(&self) -> Fingerprinted<'_> {
        Fingerprinted {
            method: self.method.as_deref().unwrap_or("POST"),
            url: &self.url,
            headers: &self.headers,
            body: &self.body,
            keyed: self.keyed,
        }
    }

    /// Checks every field against a call timeout of at most `max_timeout`, as the kind
    /// does before it runs; the error starts with the field's name (`url`, `lookup_url`,
    /// `method`, `header`, `timeout_ms`) and says what to do.
    pub fn check(&self, max_timeout: Duration) -> Result<(), String> {
        self.validate(max_timeout).map(|_| ())
    }

    /// [`HttpArgs::check`], keeping the validated request.
    pub(crate) fn validate(&self, max_timeout: Duration) -> Result<Request, String> {
        let url = web_url("url", &self.url)?;
        if let Some(lookup) = &self.lookup_url {
            web_url("lookup_url", lookup)?;
        }
        let name = self.method.as_deref().unwrap_or("POST");
        let method = Method::from_bytes(name.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("method {name:?} is not an HTTP method"))?;
        let mut headers = HeaderMap::new();
        for (k, v) in &self.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("header name {k:?} is not valid"))?;
            if ["idempotency-key", "host", "content-length"].contains(&name.as_str()) {
                return Err(format!(
                    "header {k:?} is set by idem (the Idempotency-Key is the intent's key, the \
                     same on every attempt); remove it from headers"
                ));
            }
            let value = HeaderValue::from_str(v)
                .map_err(|_| format!("header {k:?} has a value that is not valid"))?;
            headers.insert(name, value);
        }
        let max_ms = u64::try_from(max_timeout.as_millis()).unwrap_or(u64::MAX);
        let timeout_ms = self.timeout_ms.unwrap_or(max_ms);
        if timeout_ms == 0 || timeout_ms > max_ms {
            return Err(format!(
                "timeout_ms {timeout_ms} is outside 1..={max_ms}: the kind's call timeout is \
                 the most a call may take, which its intent lease is sized for"
            ));
        }
        Ok(Request {
            method,
            url,
            headers,
            body: self.body.clone(),
            timeout: Duration::from_millis(timeout_ms),
            keyed: self.keyed,
        })
    }
}

/// An absolute `http://` or `https://` URL.
fn web_url(field: &str, text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("{field} {text:?} is not a URL: {e}"))?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        _ => Err(format!(
            "{field} {text:?} must be an http:// or https:// URL with a host"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> HttpArgs {
        serde_json::from_value(serde_json::json!({"url": url})).expect("decode")
    }

    #[test]
    fn defaults_are_a_keyed_post_with_the_kinds_timeout() {
        let r = args("https://api.example.com/charges")
            .validate(Duration::from_secs(30))
            .expect("valid");
        assert_eq!((r.method, r.keyed), (Method::POST, true));
        assert_eq!(r.timeout, Duration::from_secs(30));
    }

    #[test]
    fn bad_fields_are_named() {
        let max = Duration::from_secs(30);
        let err = |a: HttpArgs| a.validate(max).unwrap_err();
        assert!(err(args("ftp://x/y")).contains("url"));
        assert!(err(args("not a url")).contains("url"));
        let mut a = args("http://x/");
        a.headers.insert("Idempotency-Key".into(), "mine".into());
        assert!(err(a).contains("set by idem"));
        let mut a = args("http://x/");
        a.timeout_ms = Some(60_000);
        assert!(err(a).contains("timeout_ms 60000"));
        let mut a = args("http://x/");
        a.method = Some("GE T".into());
        assert!(err(a).contains("method"));
        let mut a = args("http://x/");
        a.lookup_url = Some("mailto:x".into());
        assert!(err(a).contains("lookup_url"));
        let unknown = serde_json::from_value::<HttpArgs>(
            serde_json::json!({"url": "http://x/", "retries": 3}),
        );
        assert!(unknown.is_err(), "unknown fields are refused");
    }
}
