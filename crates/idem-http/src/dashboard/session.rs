//! Dashboard sessions: a random 256-bit id in an `HttpOnly`, `SameSite=Strict` cookie,
//! and a server-side store that maps it to the operator, the session's CSRF token and
//! its expiry.
//!
//! What must stay true: an id is never derived from anything a client can guess (256
//! bits from the operating system's generator through `rand`'s thread RNG); a session
//! past its expiry is gone (judged on the client's clock, so tests inject time); the
//! store never holds more than [`MAX_SESSIONS`] (the oldest is dropped first).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use idem_store::Timestamp;
use rand::RngCore;

use super::DashState;
use super::layout::refusal;
use crate::auth::Auth;
use crate::principal::Principal;

/// The session cookie's name.
pub const COOKIE: &str = "idem_session";

/// How long a session lasts after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// The most sessions held at once; a login beyond it drops the oldest.
pub const MAX_SESSIONS: usize = 10_000;

/// One logged-in operator.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who acts.
    pub principal: Principal,
    /// The token every state-changing form carries (hex, 256 bits).
    pub csrf: String,
    /// When the session ends.
    pub expires_at: Timestamp,
}

/// The server-side session store.
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for `principal` at `now`; its id (for the cookie) and the session.
    pub fn create(&self, principal: Principal, now: Timestamp) -> (String, Session) {
        let ttl = chrono::Duration::from_std(SESSION_TTL).expect("the TTL fits");
        let session = Session {
            principal,
            csrf: random_hex(),
            expires_at: now + ttl,
        };
        let id = random_hex();
        let mut by_id = self.by_id.lock().expect("sessions lock");
        by_id.retain(|_, s| s.expires_at > now);
        if by_id.len() >= MAX_SESSIONS {
            let oldest = by_id.iter().min_by_key(|(_, s)| s.expires_at);
            if let Some(oldest) = oldest.map(|(id, _)| id.clone()) {
                by_id.remove(&oldest);
            }
        }
        by_id.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session `id` names at `now`; an expired one is removed.
    pub fn get(&self, id: &str, now: Timestamp) -> Option<Session> {
        let mut by_id = self.by_id.lock().expect("sessions lock");
        match by_id.get(id) {
            Some(s) if s.expires_at > now => Some(s.clone()),
            Some(_) => {
                by_id.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id`.
    pub fn remove(&self, id: &str) {
        self.by_id.lock().expect("sessions lock").remove(id);
    }
}

/// 256 random bits, as 64 hex digits.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session id the request's cookie carries, if any.
pub fn cookie_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// The `Set-Cookie` value that carries `id` (empty with max-age 0: removes it).
pub fn set_cookie(id: &str) -> HeaderValue {
    let age = if id.is_empty() {
        0
    } else {
        SESSION_TTL.as_secs()
    };
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Max-Age={age}; Path=/; HttpOnly; SameSite=Strict"
    ))
    .expect("a cookie of hex digits is a header value")
}

/// The middleware of every page and action: puts the request's [`Session`] in its
/// extensions. Without one, a page read goes to the login page and an action is refused
/// (401); under `--dev` a page read opens a session for the operator `dev` instead.
pub async fn require(State(state): State<DashState>, mut request: Request, next: Next) -> Response {
    let now = state.now();
    let found = cookie_id(request.headers()).and_then(|id| state.sessions.get(&id, now));
    if let Some(session) = found {
        request.extensions_mut().insert(session);
        return next.run(request).await;
    }
    if request.method() != Method::GET {
        return refusal(
            axum::http::StatusCode::UNAUTHORIZED,
            "No session: log in first. Nothing was changed.",
        );
    }
    match &state.auth {
        Auth::Dev => {
            let (id, session) = state.sessions.create(Principal::operator("dev"), now);
            request.extensions_mut().insert(session);
            let mut response = next.run(request).await;
            response
                .headers_mut()
                .append(header::SET_COOKIE, set_cookie(&id));
            response
        }
        Auth::Tokens(_) => Redirect::to("/login").into_response(),
    }
}

/// The state's clock as a timestamp: injected time in tests, else the system's.
pub fn now_of(clock: &Arc<dyn idem::Clock>) -> Timestamp {
    clock.now().unwrap_or_else(chrono::Utc::now)
}
