//! The demo's remote services: two in-process mock remotes on loopback that the worker
//! processes call through the built-in `http` kind, one honouring `Idempotency-Key`
//! (keyed) and one that does not (unkeyed). Some calls to the unkeyed one are applied and
//! then answered 503, so their outcome is unknown and goes to reconciliation; workers
//! killed or paused mid-call leave intents that are taken over or reconciled.
//!
//! What the remotes counted is checked against what idem recorded: every keyed call
//! applied once; every unkeyed call applied at least once, and every key applied more
//! than once marked `duplicate` (made visible, never silent).

use std::time::Duration;

use idem::builtin::{Http, HttpConfig};
use idem::{Idem, IntentList, IntentState, Job};
use idem_mock_remote::{Fault, MockRemote, Mode};

use super::QUEUE;

/// Every how many jobs one is a remote call.
pub(super) const EVERY: usize = 10;

/// How many unkeyed calls are applied and then answered 503 (unknown outcome).
const UNKNOWN_OUTCOMES: usize = 5;

/// The `http` kind as the demo's workers and its reconciler run it: calls time out well
/// inside the short lease the demo uses, so that chaos resolves in seconds.
pub(super) fn http(lease_ms: u64) -> anyhow::Result<Http> {
    Ok(Http::new(HttpConfig {
        call_timeout: Duration::from_millis(lease_ms / 3),
        lease: Duration::from_millis(lease_ms),
        ..HttpConfig::default()
    })?)
}

/// The two remotes.
pub(super) struct Remotes {
    keyed: MockRemote,
    unkeyed: MockRemote,
}

impl Remotes {
    /// Starts both, with some unknown outcomes programmed on the unkeyed one.
    pub(super) fn start() -> anyhow::Result<Remotes> {
        let unkeyed = MockRemote::start(Mode::Unkeyed)?;
        for _ in 0..UNKNOWN_OUTCOMES {
            unkeyed.inject(Fault::ApplyThenStatus(503));
        }
        Ok(Remotes {
            keyed: MockRemote::start(Mode::Keyed)?,
            unkeyed,
        })
    }

    /// The remote call of demo job `i` (one in [`EVERY`]), alternately keyed and
    /// unkeyed, with an enqueue key so that a repeated request is the same call.
    pub(super) fn job(&self, call: usize) -> Job {
        let keyed = call.is_multiple_of(2);
        let remote = if keyed { &self.keyed } else { &self.unkeyed };
        let effects = format!("{}/effects", remote.url());
        let mut args = serde_json::json!({
            "url": effects, "keyed": keyed, "body": {"call": call},
        });
        if !keyed {
            args["lookup_url"] = effects.into();
        }
        Job::new("http", args)
            .queue(QUEUE)
            .enqueue_key(format!("call-{call}"))
    }

    /// What the remotes hold against what idem recorded.
    pub(super) async fn check(&self, idem: &Idem) -> anyhow::Result<RemoteVerdict> {
        let mut v = RemoteVerdict::default();
        for row in intents(idem).await? {
            v.takeovers += usize::try_from(row.attempt - 1).unwrap_or(0);
            match row.unkeyed {
                false => {
                    v.keyed_calls += 1;
                    let applied = self.keyed.applied_for(&row.key);
                    v.keyed_applied_twice += applied.saturating_sub(1);
                    v.keyed_missing +=
                        usize::from(applied == 0 && row.state == IntentState::Completed);
                }
                true => {
                    v.unkeyed_calls += 1;
                    let copies = self.unkeyed.applied_for(&row.key);
                    v.unkeyed_missing +=
                        usize::from(copies == 0 && row.state == IntentState::Completed);
                    if copies > 1 {
                        v.extra_copies += copies - 1;
                        match row.state {
                            IntentState::Duplicate => v.duplicates_visible += 1,
                            _ => v.duplicates_silent += 1,
                        }
                    }
                    v.unknown_left += usize::from(row.state == IntentState::Unknown);
                    v.manual += usize::from(row.state == IntentState::Manual);
                }
            }
        }
        v.requests = self.keyed.requests_total() + self.unkeyed.requests_total();
        Ok(v)
    }
}

/// Every intent of the run (the demo's database is its own).
async fn intents(idem: &Idem) -> anyhow::Result<Vec<idem::IntentRow>> {
    let (mut all, mut after) = (Vec::new(), None);
    loop {
        let page = idem
            .intents(IntentList {
                after: after.clone(),
                limit: 1000,
                ..IntentList::default()
            })
            .await?;
        let Some(last) = page.last() else {
            return Ok(all);
        };
        after = Some(last.key.clone());
        all.extend(page);
    }
}

/// What the remotes counted, against idem's intents.
#[derive(Default)]
pub(super) struct RemoteVerdict {
    /// Keyed calls (intents).
    pub(super) keyed_calls: usize,
    /// Keyed calls the remote applied more than once (must be 0).
    pub(super) keyed_applied_twice: usize,
    /// Keyed calls recorded completed that the remote never applied (must be 0).
    pub(super) keyed_missing: usize,
    /// Unkeyed calls (intents).
    pub(super) unkeyed_calls: usize,
    /// Unkeyed calls recorded completed that the remote never applied (must be 0).
    pub(super) unkeyed_missing: usize,
    /// Copies beyond the first that the unkeyed remote holds.
    pub(super) extra_copies: usize,
    /// Keys with extra copies whose intent is marked duplicate.
    pub(super) duplicates_visible: usize,
    /// Keys with extra copies whose intent is not marked duplicate (must be 0).
    pub(super) duplicates_silent: usize,
    /// Intents still unknown after reconciliation (must be 0).
    pub(super) unknown_left: usize,
    /// Intents parked for an operator.
    pub(super) manual: usize,
    /// Requests the remotes received (calls, retries, lookups).
    pub(super) requests: usize,
    /// Intents taken over or retaken after their holder lost them or released them.
    pub(super) takeovers: usize,
}

impl RemoteVerdict {
    pub(super) fn ok(&self) -> bool {
        self.keyed_applied_twice == 0
            && self.keyed_missing == 0
            && self.unkeyed_missing == 0
            && self.duplicates_silent == 0
            && self.unknown_left == 0
    }
}
