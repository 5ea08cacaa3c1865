//! The request log: one entry per request the remote answered or chose never to answer.
//!
//! An entry is written when the request's outcome is decided, so a request still waiting
//! at the gate or in a delay is not in the log yet; a hung request is, with no status.

/// What the remote did with one request.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// `"POST"` for an apply, `"GET"` for a lookup.
    pub method: &'static str,
    /// The `Idempotency-Key` header of an apply, or the `reference` a lookup asked for.
    pub key: Option<String>,
    /// The apply's JSON body (`Null` when empty; `None` for a lookup or an unparsable body).
    pub body: Option<serde_json::Value>,
    /// The id of the copy this request applied; `None` when it applied nothing.
    pub applied: Option<String>,
    /// True when a keyed remote replayed an earlier copy's answer.
    pub replayed: bool,
    /// The status answered; `None` when the remote never answered (hang, or shut down).
    pub status: Option<u16>,
}

impl LogEntry {
    /// An entry for a request that has done nothing yet.
    pub(crate) fn new(method: &'static str, key: Option<String>) -> Self {
        LogEntry {
            method,
            key,
            body: None,
            applied: None,
            replayed: false,
            status: None,
        }
    }
}
