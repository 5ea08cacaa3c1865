//! The service the layer wraps around an app: reserve, run, store or release, replay.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use idem_store::{
    HttpKeyComplete, HttpKeyRelease, HttpKeyReserve, HttpKeyReserved, HttpKeyRow, HttpKeyState,
    Store, Timestamp,
};

use super::{AnswerStored, IdempotencyConfig, REPLAYED, Reservation, fingerprint, key};
use crate::principal::Principal;
use crate::problem::{NotStored, Problem};

/// Statuses that mean the request was refused before its handler acted: never stored.
const REFUSALS: [StatusCode; 8] = [
    StatusCode::BAD_REQUEST,
    StatusCode::UNAUTHORIZED,
    StatusCode::FORBIDDEN,
    StatusCode::REQUEST_TIMEOUT,
    StatusCode::PAYLOAD_TOO_LARGE,
    StatusCode::UNSUPPORTED_MEDIA_TYPE,
    StatusCode::UNPROCESSABLE_ENTITY,
    StatusCode::TOO_MANY_REQUESTS,
];

/// The layer's service; see [`super`].
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    store: Arc<dyn Store>,
    config: Arc<IdempotencyConfig>,
}

impl<S> IdempotencyService<S> {
    pub(super) fn new(
        inner: S,
        store: Arc<dyn Store>,
        config: Arc<IdempotencyConfig>,
    ) -> IdempotencyService<S> {
        IdempotencyService {
            inner,
            store,
            config,
        }
    }
}

impl<S> tower::Service<Request> for IdempotencyService<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The clone that was driven to readiness serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let store = self.store.clone();
        let config = self.config.clone();
        Box::pin(async move { Ok(handle(inner, store, config, request).await) })
    }
}

async fn handle<S>(
    mut inner: S,
    store: Arc<dyn Store>,
    config: Arc<IdempotencyConfig>,
    request: Request,
) -> Response
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return call(&mut inner, request).await;
    }
    let key = match key::from_headers(request.headers()) {
        Ok(None) => return call(&mut inner, request).await,
        Ok(Some(key)) => key,
        Err(e) => {
            return Problem::new(StatusCode::BAD_REQUEST, "idempotency_key_invalid", e.0)
                .rejection();
        }
    };
    let principal = request
        .extensions()
        .get::<Principal>()
        .map(|p| p.name().to_string())
        .unwrap_or_else(|| config.anonymous.clone());
    let (parts, body) = request.into_parts();
    let body = match read_body(body, config.max_body).await {
        Ok(body) => body,
        Err(problem) => return problem.rejection(),
    };
    let fingerprint = fingerprint::of(&parts.method, &parts.uri, &body);
    let reserved = store
        .http_key_reserve(HttpKeyReserve {
            principal: principal.clone(),
            key: key.clone(),
            fingerprint: fingerprint.clone(),
            lease_ms: millis(config.lease),
            retention_ms: millis(config.retention),
            now: config.clock.now(),
        })
        .await;
    let row = match reserved {
        Ok(HttpKeyReserved::Reserved(row)) => row,
        Ok(HttpKeyReserved::Held { row, now }) => return held(row, now, &fingerprint),
        Err(e) => {
            tracing::warn!(error = %e, "the Idempotency-Key store is unavailable");
            return Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "idempotency_store_unavailable",
                "the Idempotency-Key could not be reserved because the store did not answer; \
                 repeat the request with the same key",
            )
            .retry_after(1)
            .rejection();
        }
    };
    let mut holding = Holding {
        store: store.clone(),
        release: Some(HttpKeyRelease {
            principal,
            key,
            fence: row.fence,
            created_at: row.created_at,
        }),
    };
    let mut request = Request::from_parts(parts, Body::from(body));
    if let Some(release) = &holding.release {
        request.extensions_mut().insert(Reservation {
            principal: release.principal.clone(),
            key: release.key.clone(),
            fence: release.fence,
            created_at: release.created_at,
        });
    }
    let response = call(&mut inner, request).await;
    let mut response = finish(&mut holding, &config, response).await;
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("false"));
    response
}

async fn call<S>(inner: &mut S, request: Request) -> Response
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, Problem> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is larger than {limit} bytes"),
            )
        } else {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "body_unreadable",
                format!("the request body could not be read: {e}"),
            )
        }
    })
}

/// The answer when the key is held by a row this request did not write.
fn held(row: HttpKeyRow, now: Timestamp, fingerprint: &str) -> Response {
    if row.fingerprint != fingerprint {
        return Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this Idempotency-Key was used for a different request (method, path, query or \
             body); use a new key for a new request",
        )
        .rejection();
    }
    match (row.state, row.status, row.body) {
        (HttpKeyState::Completed, Some(status), Some(body)) => replay(status, row.headers, body),
        _ => {
            let wait = (row.locked_until - now).num_milliseconds().max(0);
            let seconds = u64::try_from((wait + 999) / 1000).unwrap_or(1).max(1);
            Problem::new(
                StatusCode::CONFLICT,
                "idempotency_key_in_flight",
                "a request with this Idempotency-Key is still being processed; repeat it \
                 after Retry-After seconds to get its answer",
            )
            .retry_after(seconds)
            .rejection()
        }
    }
}

fn replay(status: i32, headers: Option<serde_json::Value>, body: Vec<u8>) -> Response {
    let status = u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let pairs: Vec<(String, String)> = headers
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default();
    let out = response.headers_mut();
    out.remove(axum::http::header::CONTENT_TYPE);
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            out.append(name, value);
        }
    }
    out.insert(REPLAYED, HeaderValue::from_static("true"));
    response.extensions_mut().insert(NotStored);
    response
}

/// Stores the holder's response, or releases the key when it must not be stored.
async fn finish(holding: &mut Holding, config: &IdempotencyConfig, response: Response) -> Response {
    if response.extensions().get::<AnswerStored>().is_some() {
        // Stored by the handler in its effect's transaction.
        holding.release = None;
        return response;
    }
    let status = response.status();
    let refused = status.is_server_error()
        || REFUSALS.contains(&status)
        || response.extensions().get::<NotStored>().is_some();
    if refused {
        holding.release().await;
        return response;
    }
    let (parts, body) = response.into_parts();
    // The handler has acted: from here the key is never released, so a repeat cannot
    // run it again before the reservation's lease ends.
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(error = %e, "a response body could not be read; its Idempotency-Key stays reserved until its lease ends");
            holding.release = None;
            return Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "response_unreadable",
                "the answer could not be read; its Idempotency-Key stays reserved until its \
                 lease ends, then a repeat runs again",
            )
            .into_response();
        }
    };
    if body.len() > config.max_stored_body {
        tracing::warn!(
            size = body.len(),
            limit = config.max_stored_body,
            "an answer was too large to store for its Idempotency-Key; it is sent, and the key \
             stays reserved until its lease ends (a repeat gets 409 until then, then runs again)"
        );
        holding.release = None;
        return Response::from_parts(parts, Body::from(body));
    }
    let headers: Vec<(String, String)> = config
        .stored_headers
        .iter()
        .flat_map(|name| {
            parts.headers.get_all(name).iter().filter_map(move |v| {
                v.to_str()
                    .ok()
                    .map(|v| (name.as_str().to_string(), v.to_string()))
            })
        })
        .collect();
    let stored = holding
        .complete(
            i32::from(parts.status.as_u16()),
            serde_json::to_value(headers).expect("strings encode"),
            body.to_vec(),
        )
        .await;
    if !stored {
        tracing::warn!(
            "an Idempotency-Key reservation lapsed before its request finished; its answer \
             was sent but not stored (raise the layer's lease above the request timeout)"
        );
    }
    Response::from_parts(parts, Body::from(body))
}

/// A reservation this request holds. Dropped unfinished (the client left mid-request),
/// it stays until its lease ends: the handler may have acted.
struct Holding {
    store: Arc<dyn Store>,
    release: Option<HttpKeyRelease>,
}

impl Holding {
    async fn release(&mut self) {
        if let Some(release) = self.release.take()
            && let Err(e) = self.store.http_key_release(release).await
        {
            tracing::warn!(error = %e, "an Idempotency-Key could not be released; it frees itself when its lease ends");
        }
    }

    async fn complete(&mut self, status: i32, headers: serde_json::Value, body: Vec<u8>) -> bool {
        let Some(release) = self.release.take() else {
            return false;
        };
        let complete = HttpKeyComplete {
            principal: release.principal.clone(),
            key: release.key.clone(),
            fence: release.fence,
            created_at: release.created_at,
            status,
            headers,
            body,
        };
        match self.store.http_key_complete(complete).await {
            Ok(stored) => stored,
            Err(e) => {
                // The handler acted: the reservation keeps blocking repeats until its
                // lease ends rather than letting one run at once.
                tracing::warn!(error = %e, "an answer could not be stored for its Idempotency-Key; the key frees itself when its lease ends");
                false
            }
        }
    }
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
