//! The faults a test injects, and the FIFO queue requests take them from.
//!
//! A fault is consumed by the next request it matches, at that request's arrival:
//! [`Fault::LookupStatus`] by the next lookup, every other fault by the next apply. Faults
//! of the other kind stay queued in their order.

use std::collections::VecDeque;
use std::time::Duration;

/// One programmed failure, consumed by the next matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Apply the effect, then never answer: the connection stays open until the client
    /// gives up (or the remote shuts down). Other requests are served meanwhile.
    ApplyThenHang,
    /// Apply the effect, then answer this status with an empty body (e.g. 500).
    ApplyThenStatus(u16),
    /// Answer this status with an empty body without applying (e.g. 503, 400, 409, 429).
    Status(u16),
    /// The next lookup answers this status with an empty body (e.g. 503: "cannot tell").
    LookupStatus(u16),
    /// Wait this long, then apply and answer normally.
    Delay(Duration),
}

impl Fault {
    /// Whether a lookup (rather than an apply) consumes this fault.
    fn is_lookup(&self) -> bool {
        matches!(self, Fault::LookupStatus(_))
    }

    /// The status this fault answers with, if it names one.
    pub(crate) fn status(&self) -> Option<u16> {
        match *self {
            Fault::ApplyThenStatus(s) | Fault::Status(s) | Fault::LookupStatus(s) => Some(s),
            Fault::ApplyThenHang | Fault::Delay(_) => None,
        }
    }
}

/// Queued faults, oldest first.
#[derive(Debug, Default)]
pub(crate) struct FaultQueue(VecDeque<Fault>);

impl FaultQueue {
    /// Queues `fault` behind the others.
    pub(crate) fn push(&mut self, fault: Fault) {
        self.0.push_back(fault);
    }

    /// Takes the oldest fault meant for an apply.
    pub(crate) fn take_apply(&mut self) -> Option<Fault> {
        self.take(|f| !f.is_lookup())
    }

    /// Takes the oldest fault meant for a lookup.
    pub(crate) fn take_lookup(&mut self) -> Option<Fault> {
        self.take(Fault::is_lookup)
    }

    fn take(&mut self, matches: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let at = self.0.iter().position(matches)?;
        self.0.remove(at)
    }
}
