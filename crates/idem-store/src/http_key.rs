//! Inbound Idempotency-Key records (`idem_http_key`): what the HTTP layer stores so that a
//! repeated request gets the first one's answer instead of running again.
//!
//! The rules the stores keep:
//! - [`crate::StoreTx::http_key_reserve`] is one atomic conditional write on the unique
//!   `(principal, key)`: it inserts a reservation (`in_progress`, fence 1, locked until
//!   now + lease), or takes over a row that no live request holds (a reservation whose
//!   lock expired, with the same fingerprint; a released row; a row older than the
//!   retention window, whatever it holds) with fence + 1, or changes nothing and returns
//!   the row that holds the key.
//! - A request's later write ([`crate::StoreTx::http_key_complete`], `http_key_release`)
//!   carries the fence and the `created_at` its reservation got, and changes nothing
//!   unless the row is still `in_progress` at both: a request whose reservation was taken
//!   over (or purged and reserved anew, which restarts the fence) never overwrites the
//!   new holder's record.
//! - A reservation whose lock is live is never taken over, not even past the retention
//!   window (a window shorter than a request would otherwise let a repeat run beside it).
//! - A released key keeps its row (state `released`), so its fence never restarts at 1
//!   while a request that held an earlier fence may still answer.

use serde::{Deserialize, Serialize};

use crate::{StoreError, Timestamp};

/// The state of an Idempotency-Key record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpKeyState {
    /// A request holds the key until `locked_until`.
    InProgress,
    /// The response is stored; a repeat with the same fingerprint replays it.
    Completed,
    /// The request ended without a stored response (a 5xx, or rejected before its
    /// handler): the next request takes the key.
    Released,
}

impl HttpKeyState {
    /// Every state.
    pub const ALL: [HttpKeyState; 3] = [
        HttpKeyState::InProgress,
        HttpKeyState::Completed,
        HttpKeyState::Released,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpKeyState::InProgress => "in_progress",
            HttpKeyState::Completed => "completed",
            HttpKeyState::Released => "released",
        }
    }

    /// The state a stored name denotes.
    pub fn parse(name: &str) -> Result<HttpKeyState, StoreError> {
        HttpKeyState::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "unknown Idempotency-Key state {name:?}; expected one of in_progress, \
                     completed, released"
                ))
            })
    }
}

impl std::fmt::Display for HttpKeyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One Idempotency-Key record, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpKeyRow {
    /// Who sent the request; keys of different principals never meet.
    pub principal: String,
    /// The key as the client sent it (unquoted).
    pub key: String,
    /// A digest of method, path, query and canonical body.
    pub fingerprint: String,
    /// Its state.
    pub state: HttpKeyState,
    /// Goes up on every reservation of the key; a request's later writes carry it.
    pub fence: i64,
    /// While `in_progress`: when the holding request's reservation lapses.
    pub locked_until: Timestamp,
    /// The stored response's status (completed only).
    pub status: Option<i32>,
    /// The stored response's selected headers, as `[[name, value], …]` (completed only).
    pub headers: Option<serde_json::Value>,
    /// The stored response's body, byte for byte (completed only).
    pub body: Option<Vec<u8>>,
    /// When the key was last reserved; the retention window and purges go by it.
    pub created_at: Timestamp,
}

/// Reserve a key for a request, or learn what holds it.
#[derive(Debug, Clone)]
pub struct HttpKeyReserve {
    /// The principal the request authenticated as.
    pub principal: String,
    /// The key.
    pub key: String,
    /// The request's fingerprint.
    pub fingerprint: String,
    /// How long the reservation blocks repeats, in milliseconds from `now`.
    pub lease_ms: i64,
    /// A row created this many milliseconds or more before `now` is past its retention
    /// and is taken as if it were absent.
    pub retention_ms: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// The answer to an [`HttpKeyReserve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpKeyReserved {
    /// The request holds the key, under the row's fence: run the handler.
    Reserved(HttpKeyRow),
    /// The key is held by a row this reservation did not write (in progress, completed,
    /// or held for another fingerprint); `now` is the store's time of the answer, so the
    /// caller can tell how long a reservation still blocks.
    Held {
        /// The row as read.
        row: HttpKeyRow,
        /// The store's clock when it was read.
        now: Timestamp,
    },
}

/// Store the response of the request that holds a key.
#[derive(Debug, Clone)]
pub struct HttpKeyComplete {
    /// The principal.
    pub principal: String,
    /// The key.
    pub key: String,
    /// The fence of the request's reservation.
    pub fence: i64,
    /// The reservation's `created_at`: with the fence, it names this reservation even
    /// after a purge re-created the row and restarted its fence at 1.
    pub created_at: Timestamp,
    /// The response status.
    pub status: i32,
    /// The selected headers, `[[name, value], …]`.
    pub headers: serde_json::Value,
    /// The body, byte for byte.
    pub body: Vec<u8>,
}

/// Give a key back without a stored response.
#[derive(Debug, Clone)]
pub struct HttpKeyRelease {
    /// The principal.
    pub principal: String,
    /// The key.
    pub key: String,
    /// The fence of the request's reservation.
    pub fence: i64,
    /// The reservation's `created_at` (see [`HttpKeyComplete::created_at`]).
    pub created_at: Timestamp,
}
