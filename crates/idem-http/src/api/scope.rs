//! What a principal may see, and the namespace of its keys.
//!
//! A client principal's enqueue keys and intent keys are stored as `p:{name}:{key}`, so
//! two principals using the same key never meet (neither deduplicates into the other's
//! job nor reads the other's intent); principal names cannot hold `:`, so no two
//! namespaces overlap. An operator's keys are stored as given, in the namespace the
//! library and the CLI use.

use idem::IdemError;
use idem_store::{BatchRow, IntentRow, JobRow};

use super::error::{not_found, problem};
use crate::principal::Principal;
use crate::problem::Problem;

/// The stored form of a key `principal` gave.
pub fn store_key(principal: &Principal, key: &str) -> String {
    if principal.is_operator() {
        key.to_string()
    } else {
        format!("p:{}:{key}", principal.name())
    }
}

/// The key as `principal` gave it, from its stored form.
pub fn shown_key(principal: &Principal, stored: &str) -> String {
    if principal.is_operator() {
        return stored.to_string();
    }
    stored
        .strip_prefix("p:")
        .and_then(|rest| rest.strip_prefix(principal.name()))
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or(stored)
        .to_string()
}

/// The principal filter of a listing: `None` (everything) for an operator.
pub fn filter(principal: &Principal) -> Option<String> {
    (!principal.is_operator()).then(|| principal.name().to_string())
}

/// Whether `principal` may see `job`.
pub fn sees_job(principal: &Principal, job: &JobRow) -> bool {
    principal.is_operator() || job.principal.as_deref() == Some(principal.name())
}

/// The record `found` if the principal may see it (`sees`), else 404 for `what`, as when
/// it does not exist.
pub fn visible<T>(
    found: Result<Option<T>, IdemError>,
    sees: impl FnOnce(&T) -> bool,
    what: &str,
) -> Result<T, Problem> {
    match found {
        Ok(Some(row)) if sees(&row) => Ok(row),
        Ok(_) => Err(not_found(what)),
        Err(e) => Err(problem(e)),
    }
}

/// Whether `principal` may see `batch` (and act on it).
pub fn sees_batch(principal: &Principal, batch: &BatchRow) -> bool {
    principal.is_operator() || batch.principal.as_deref() == Some(principal.name())
}

/// Whether `principal` may see `intent` (held by `job`, when the job is still stored).
pub fn sees_intent(principal: &Principal, intent: &IntentRow, job: Option<&JobRow>) -> bool {
    principal.is_operator() || job.is_some_and(|j| j.id == intent.job_id && sees_job(principal, j))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_never_meet() {
        let a = Principal::client("a");
        let ab = Principal::client("a-b");
        let op = Principal::operator("ops");
        assert_eq!(store_key(&a, "b:c"), "p:a:b:c");
        assert_eq!(shown_key(&a, "p:a:b:c"), "b:c");
        assert_ne!(store_key(&a, "b:c"), store_key(&ab, "c"));
        assert_eq!(store_key(&op, "x"), "x");
        assert_eq!(shown_key(&op, "p:a:x"), "p:a:x");
    }
}
