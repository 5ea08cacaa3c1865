//! What a call's answer means for its intent and its job (DESIGN.md, "Built-in job kind
//! `http`"): 2xx applied; 408, 409, 425 and 429 not applied, try again; other 4xx
//! refused for good; 5xx, timeouts and resets may have been applied; no connection
//! means the request never left.

/// The class of a call's ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// 2xx: applied.
    Applied,
    /// A 4xx the remote will give again: not applied, and retrying cannot help.
    Refused,
    /// Not applied, worth retrying (408, 409, 425, 429, 3xx is not among them).
    NotApplied,
    /// May have been applied (5xx, timeout, reset after the request was written).
    Ambiguous,
    /// Certainly never left (no connection).
    NeverLeft,
}

/// The class of a response status.
pub(crate) fn of_status(status: u16) -> Class {
    match status {
        200..=299 => Class::Applied,
        408 | 409 | 425 | 429 => Class::NotApplied,
        500..=599 => Class::Ambiguous,
        // 1xx never reaches here; 3xx is not followed (a redirect could re-send a body
        // elsewhere), so it is refused like a 4xx: the job's URL needs fixing.
        _ => Class::Refused,
    }
}

/// The class of a failed call.
pub(crate) fn of_error(e: &reqwest::Error) -> Class {
    if e.is_connect() || e.is_builder() {
        Class::NeverLeft
    } else {
        Class::Ambiguous
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classed_as_designed() {
        assert_eq!(of_status(200), Class::Applied);
        assert_eq!(of_status(201), Class::Applied);
        for s in [408, 409, 425, 429] {
            assert_eq!(of_status(s), Class::NotApplied, "{s}");
        }
        for s in [400, 401, 403, 404, 422, 301, 302] {
            assert_eq!(of_status(s), Class::Refused, "{s}");
        }
        for s in [500, 502, 503, 504] {
            assert_eq!(of_status(s), Class::Ambiguous, "{s}");
        }
    }
}
