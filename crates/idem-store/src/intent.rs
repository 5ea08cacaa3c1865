//! Intents: the two-phase records of effects that leave the store (`idem_intent`).
//!
//! A call to another service cannot commit with its key, so it is bracketed: an intent is
//! reserved `in_progress` with a lease and a fence of its own before the call, and its
//! outcome is recorded after. The rules the stores keep:
//! - [`crate::StoreTx::intent_begin`] is one atomic conditional write on the unique key,
//!   made only when the job's claim is current (checked in the same statement). It
//!   inserts a new intent, takes over one whose holder's lease has expired (attempt + 1,
//!   fence + 1), or changes nothing and reports what holds the key.
//! - Taking over an expired intent of an unkeyed remote never hands out a new lease: the
//!   earlier holder may have sent the call, so the intent becomes `unknown` (fence + 1)
//!   and goes to reconciliation.
//! - Every later write of a holder carries the intent's fence; a write under any other
//!   fence is [`crate::StoreError::IntentLost`] and changes nothing.
//! - A fence is never handed out twice for one key: a call that certainly never left
//!   keeps its row as `released`, and the next begin takes it with fence + 1, so no
//!   earlier holder can write to the new holder's intent.
//! - Reconciliation resolves an intent only from the state and fence it read.

use serde::{Deserialize, Serialize};

use crate::{LeaseToken, StoreError, Timestamp};

/// The state of an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Reserved: a holder with a live lease may be making the call.
    InProgress,
    /// The call was applied; the result is stored.
    Completed,
    /// The call was refused for good (the remote said so); it was not applied.
    Failed,
    /// The call may or may not have been applied; reconciliation decides.
    Unknown,
    /// The remote holds two or more copies; every copy's id is recorded.
    Duplicate,
    /// Reconciliation could not tell; an operator decides. Never re-sent automatically.
    Manual,
    /// The call certainly never left (its holder released it, or reconciliation found it
    /// absent): the next begin takes the intent, with its fence moved on.
    Released,
}

impl IntentState {
    /// The states whose call's outcome is still to be settled, by reconciliation or an
    /// operator: the states an operator settles an intent from.
    pub const AWAITING_SETTLEMENT: [IntentState; 2] = [IntentState::Unknown, IntentState::Manual];

    /// Whether the call's outcome is still to be settled ([`Self::AWAITING_SETTLEMENT`]):
    /// a job awaiting the intent waits on; in any other state it is put back to run.
    pub fn awaits_settlement(self) -> bool {
        Self::AWAITING_SETTLEMENT.contains(&self)
    }

    /// Every state, in lifecycle order.
    pub const ALL: [IntentState; 7] = [
        IntentState::InProgress,
        IntentState::Completed,
        IntentState::Failed,
        IntentState::Unknown,
        IntentState::Duplicate,
        IntentState::Manual,
        IntentState::Released,
    ];

    /// The name stored in the database and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentState::InProgress => "in_progress",
            IntentState::Completed => "completed",
            IntentState::Failed => "failed",
            IntentState::Unknown => "unknown",
            IntentState::Duplicate => "duplicate",
            IntentState::Manual => "manual",
            IntentState::Released => "released",
        }
    }

    /// The state a stored name denotes.
    pub fn parse(name: &str) -> Result<IntentState, StoreError> {
        IntentState::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "unknown intent state {name:?}; expected one of in_progress, completed, \
                     failed, unknown, duplicate, manual, released"
                ))
            })
    }

    /// Whether an operator or a reconciler has to act on an intent in this state.
    pub fn needs_attention(self) -> bool {
        matches!(
            self,
            IntentState::Unknown | IntentState::Duplicate | IntentState::Manual
        )
    }
}

impl std::fmt::Display for IntentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for IntentState {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IntentState::parse(s)
    }
}

/// One intent, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentRow {
    /// The intent's key: the logical request, the same on every attempt.
    pub key: String,
    /// Its state.
    pub state: IntentState,
    /// A digest of the request; the same key with another fingerprint is refused.
    pub fingerprint: String,
    /// Whether the remote ignores idempotency keys (an `UnkeyedRemote` effect).
    pub unkeyed: bool,
    /// The intent's own fence: goes up on every takeover and resolution.
    pub fence: i64,
    /// How many holders have begun it (1 for the first, +1 per takeover).
    pub attempt: i64,
    /// When the holder's lease ends; `None` once the intent left `in_progress`.
    pub lease_expires_at: Option<Timestamp>,
    /// The job whose claim holds (or last held) the intent.
    pub job_id: i64,
    /// That claim's job fence.
    pub job_fence: i64,
    /// The stored result of a completed call.
    pub result: Option<serde_json::Value>,
    /// Why it failed, or why its outcome is unknown, duplicate or manual.
    pub error: Option<String>,
    /// The remote's ids for the effect (two or more when `duplicate`).
    pub remote_refs: Vec<String>,
    /// When the intent was first reserved; purges go by it.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl IntentRow {
    /// The token a holder carries for later writes.
    pub fn token(&self) -> IntentToken {
        IntentToken {
            key: self.key.clone(),
            fence: self.fence,
        }
    }
}

/// Reserve an intent for a call, or learn what holds its key.
#[derive(Debug, Clone)]
pub struct IntentBegin {
    /// The intent's key.
    pub key: String,
    /// A digest of the request (method, target, body …).
    pub fingerprint: String,
    /// Whether the remote ignores idempotency keys.
    pub unkeyed: bool,
    /// The lease a holder gets, in milliseconds.
    pub lease_ms: i64,
    /// The job claim that begins it; refused with `LeaseLost` unless current.
    pub job: LeaseToken,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// The answer to an [`IntentBegin`]: what the caller may do.
#[derive(Debug, Clone, PartialEq)]
pub enum IntentBegun {
    /// The caller holds the intent (new, or taken over when `attempt > 1`): make the
    /// call, under the row's fence.
    Begun(IntentRow),
    /// Another holder's lease is live until `lease_expires_at`: do not call; try later.
    InProgress(IntentRow),
    /// The call was applied (`completed`, or `duplicate`): nothing runs; the row has the
    /// stored result (none for a duplicate that reconciliation found before any holder
    /// recorded one).
    Completed(IntentRow),
    /// The remote refused the call for good: nothing runs.
    Failed(IntentRow),
    /// The outcome is not known (`unknown`, `manual`): reconciliation decides, nothing
    /// is sent. Also the answer of a takeover of an unkeyed intent.
    Reconcile(IntentRow),
    /// The key is held for a request with another fingerprint: nothing changed.
    Mismatch(IntentRow),
}

impl IntentBegun {
    /// The answer for a row that this begin wrote: held (`in_progress`), or, for an
    /// unkeyed takeover, `unknown`.
    pub fn of_written(row: IntentRow) -> IntentBegun {
        match row.state {
            IntentState::InProgress => IntentBegun::Begun(row),
            _ => IntentBegun::Reconcile(row),
        }
    }

    /// The answer for a row that this begin did not write, by its state.
    pub fn of_existing(row: IntentRow, fingerprint: &str) -> IntentBegun {
        if row.fingerprint != fingerprint {
            return IntentBegun::Mismatch(row);
        }
        match row.state {
            // A released row is taken by the begin itself; met here only by a begin
            // that raced its release, which tries again later.
            IntentState::InProgress | IntentState::Released => IntentBegun::InProgress(row),
            IntentState::Completed | IntentState::Duplicate => IntentBegun::Completed(row),
            IntentState::Failed => IntentBegun::Failed(row),
            IntentState::Unknown | IntentState::Manual => IntentBegun::Reconcile(row),
        }
    }

    /// The row behind the answer.
    pub fn row(&self) -> &IntentRow {
        match self {
            IntentBegun::Begun(r)
            | IntentBegun::InProgress(r)
            | IntentBegun::Completed(r)
            | IntentBegun::Failed(r)
            | IntentBegun::Reconcile(r)
            | IntentBegun::Mismatch(r) => r,
        }
    }
}

/// What a holder carries: the intent's key and the fence it began under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IntentToken {
    /// The intent's key.
    pub key: String,
    /// The fence of the holder's begin.
    pub fence: i64,
}

/// Extend a holder's lease; refused once the lease has lapsed or the fence moved on.
#[derive(Debug, Clone)]
pub struct IntentRenew {
    /// The holder.
    pub token: IntentToken,
    /// The new lease, in milliseconds from now.
    pub lease_ms: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// How a holder's call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum IntentOutcome {
    /// Applied: store the result and the remote's ids.
    Completed {
        /// The result to hand to every later `begin` of the key.
        result: serde_json::Value,
        /// The remote's ids for the effect.
        remote_refs: Vec<String>,
    },
    /// Refused for good by the remote (not applied).
    Failed {
        /// Why.
        error: String,
    },
    /// May or may not have been applied.
    Unknown {
        /// What happened (timeout, reset, 5xx from a service without keys …).
        error: String,
    },
    /// Certainly never left (connect refused, local validation): the intent becomes
    /// `released`, and the next `begin` takes it with the fence moved on.
    Released,
}

/// Record a holder's outcome under its fence.
#[derive(Debug, Clone)]
pub struct IntentFinish {
    /// The holder.
    pub token: IntentToken,
    /// The outcome.
    pub outcome: IntentOutcome,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// What reconciliation (or an operator) found.
#[derive(Debug, Clone, PartialEq)]
pub enum IntentResolution {
    /// The remote applied it once: `completed`, with the remote's id.
    Applied {
        /// The result to store.
        result: serde_json::Value,
        /// The remote's ids.
        remote_refs: Vec<String>,
    },
    /// The remote does not have it: `released`, so the next `begin` takes it (fence
    /// moved on) and sends again with the same key.
    Absent,
    /// The remote holds two or more copies: `duplicate`, with every id.
    Duplicate {
        /// Every copy's id.
        remote_refs: Vec<String>,
    },
    /// Cannot tell: `manual`, for an operator.
    Manual {
        /// Why not.
        error: String,
    },
}

/// Resolve an intent, only from the state and fence the resolver read.
#[derive(Debug, Clone)]
pub struct IntentResolve {
    /// The intent as the resolver read it: its key and fence.
    pub token: IntentToken,
    /// The states it may be resolved from (the resolver's precondition).
    pub from: Vec<IntentState>,
    /// What to record.
    pub resolution: IntentResolution,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

impl IntentResolve {
    /// Why a resolution matched nothing, given the intent as it is now: its state or
    /// fence moved on (`Conflict`), or it does not exist (`NotFound`).
    pub fn refused(&self, found: Option<&IntentRow>) -> StoreError {
        match found {
            Some(found) => self.conflict_with(found),
            None => StoreError::not_found(format!("intent {:?}", self.token.key)),
        }
    }

    /// The error when the intent exists but its state or fence moved on from what the
    /// resolver read: `found` is the intent as it is now.
    fn conflict_with(&self, found: &IntentRow) -> StoreError {
        let from: Vec<&str> = self.from.iter().map(|s| s.as_str()).collect();
        StoreError::Conflict(format!(
            "intent {:?} is {} at fence {}, not one of [{}] at fence {} as read; it changed \
             meanwhile, so read it again and decide afresh",
            self.token.key,
            found.state,
            found.fence,
            from.join(", "),
            self.token.fence
        ))
    }
}

/// Intents in one state (the metrics' gauge of intents by state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentCount {
    /// The state.
    pub state: IntentState,
    /// How many intents.
    pub count: i64,
}

/// List intents, in key order.
#[derive(Debug, Clone, Default)]
pub struct IntentList {
    /// Only these states (empty = any).
    pub states: Vec<IntentState>,
    /// Only unkeyed (`Some(true)`) or keyed (`Some(false)`) intents.
    pub unkeyed: Option<bool>,
    /// Only intents last changed before this time.
    pub updated_before: Option<Timestamp>,
    /// Only intents created at or after this time.
    pub created_since: Option<Timestamp>,
    /// Only the intents of this job.
    pub job_id: Option<i64>,
    /// Only the intents whose job (still in the store) was enqueued by this principal.
    pub principal: Option<String>,
    /// Keys after this one (keyset paging).
    pub after: Option<String>,
    /// At most this many.
    pub limit: u32,
}

impl IntentList {
    /// The state names to bind; every state when none is given.
    pub fn state_names(&self) -> Vec<&'static str> {
        let states: &[IntentState] = if self.states.is_empty() {
            &IntentState::ALL
        } else {
            &self.states
        };
        states.iter().map(|s| s.as_str()).collect()
    }
}

/// The columns a holder's outcome writes: state, result, error, remote ids. Both stores
/// bind these, so an outcome means the same row on each.
pub fn outcome_columns(
    outcome: IntentOutcome,
) -> (
    IntentState,
    Option<serde_json::Value>,
    Option<String>,
    Vec<String>,
) {
    match outcome {
        IntentOutcome::Completed {
            result,
            remote_refs,
        } => (IntentState::Completed, Some(result), None, remote_refs),
        IntentOutcome::Failed { error } => (IntentState::Failed, None, Some(error), vec![]),
        IntentOutcome::Unknown { error } => (IntentState::Unknown, None, Some(error), vec![]),
        IntentOutcome::Released => (IntentState::Released, None, None, vec![]),
    }
}

/// The columns a resolution writes: state, result, remote ids, error (`None` keeps
/// what the row has). Both stores bind these.
pub fn resolution_columns(
    resolution: IntentResolution,
) -> (
    IntentState,
    Option<serde_json::Value>,
    Option<Vec<String>>,
    Option<String>,
) {
    match resolution {
        IntentResolution::Applied {
            result,
            remote_refs,
        } => (
            IntentState::Completed,
            Some(result),
            Some(remote_refs),
            None,
        ),
        IntentResolution::Absent => (IntentState::Released, None, None, None),
        IntentResolution::Duplicate { remote_refs } => {
            (IntentState::Duplicate, None, Some(remote_refs), None)
        }
        IntentResolution::Manual { error } => (IntentState::Manual, None, None, Some(error)),
    }
}
