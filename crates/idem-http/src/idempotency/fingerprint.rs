//! The fingerprint of a request: what must be the same for a repeat to be a replay.
//!
//! It covers the method, the path, the query string and the body. A body that parses as
//! JSON enters as its canonical form (object keys sorted, no whitespace), so key order
//! and spacing do not matter while array order does; any other body enters as the
//! SHA-256 of its bytes.

use axum::http::{Method, Uri};
use serde::Serialize;

#[derive(Serialize)]
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    query: &'a str,
    body: Body,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Body {
    Empty,
    Json(serde_json::Value),
    Bytes(String),
}

/// The fingerprint of a request with this method, target and body.
pub fn of(method: &Method, uri: &Uri, body: &[u8]) -> String {
    let body = if body.is_empty() {
        Body::Empty
    } else {
        match serde_json::from_slice(body) {
            Ok(value) => Body::Json(value),
            Err(_) => Body::Bytes(idem::intent::sha256_hex(body)),
        }
    };
    let request = Request {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        body,
    };
    idem::intent::fingerprint(&request).expect("a request of strings and JSON always encodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(uri: &str, body: &str) -> String {
        of(&Method::POST, &uri.parse().unwrap(), body.as_bytes())
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        assert_eq!(
            post("/v1/jobs", r#"{"kind":"a","args":{"x":1,"y":[1,2]}}"#),
            post(
                "/v1/jobs",
                "{ \"args\": {\"y\": [1, 2], \"x\": 1},\n \"kind\": \"a\" }"
            )
        );
    }

    #[test]
    fn array_order_path_query_method_and_bytes_do() {
        let base = post("/v1/jobs?a=1", r#"{"x":[1,2]}"#);
        assert_ne!(base, post("/v1/jobs?a=1", r#"{"x":[2,1]}"#));
        assert_ne!(base, post("/v1/jobs?a=2", r#"{"x":[1,2]}"#));
        assert_ne!(base, post("/v1/job?a=1", r#"{"x":[1,2]}"#));
        assert_ne!(
            base,
            of(
                &Method::PUT,
                &"/v1/jobs?a=1".parse().unwrap(),
                br#"{"x":[1,2]}"#
            )
        );
        assert_ne!(post("/", "not json"), post("/", "not json!"));
        assert_ne!(post("/", ""), post("/", "\"\""));
    }
}
