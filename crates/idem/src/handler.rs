//! The [`Handler`] trait, effect classes, and the type-erased registry entry the worker
//! dispatches to.
//!
//! Every handler declares its [`EffectClass`], which decides what idem can promise about
//! its effect (DESIGN.md section 1). Arguments are decoded before the handler runs; args
//! that do not decode are a permanent failure with a message naming the kind and the
//! decoding error, and the handler never sees them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::context::JobContext;
use crate::error::JobError;
use crate::intent::{IntentPolicy, Lookup};
use idem_store::{IntentRow, JobRow};

/// What a handler's effect is, and so what idem guarantees about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectClass {
    /// Rows in the same store as the queue: effect key, effect and completion commit in
    /// one fenced transaction. Guarantee: effect-once.
    Transactional,
    /// A call to a service that honours an idempotency key, sent with the same key on
    /// every attempt. Guarantee: effect-once if the remote honours the key.
    KeyedRemote,
    /// A call to a service without idempotency. Guarantee: duplicate-visible, never a
    /// silent duplicate (an unknown outcome goes to reconciliation).
    UnkeyedRemote,
}

impl EffectClass {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectClass::Transactional => "Transactional",
            EffectClass::KeyedRemote => "KeyedRemote",
            EffectClass::UnkeyedRemote => "UnkeyedRemote",
        }
    }

    /// Every class, in the order of the guarantee table.
    pub const ALL: [EffectClass; 3] = [
        EffectClass::Transactional,
        EffectClass::KeyedRemote,
        EffectClass::UnkeyedRemote,
    ];

    /// How idem keeps the guarantee.
    pub fn mechanism(self) -> &'static str {
        match self {
            EffectClass::Transactional => {
                "effect key + effect + job completion in one fenced transaction"
            }
            EffectClass::KeyedRemote => {
                "intent record with lease expiry and takeover, the same key on every attempt"
            }
            EffectClass::UnkeyedRemote => {
                "intent record; an outcome that may or may not have been applied goes to \
                 reconciliation (looked up on the remote by its key), never a blind retry; \
                 an audit looks completed calls up again and marks a late second copy \
                 duplicate"
            }
        }
    }

    /// The guarantee of the class, in plain words.
    pub fn guarantee(self) -> &'static str {
        match self {
            EffectClass::Transactional => "effect-once",
            EffectClass::KeyedRemote => "effect-once if the remote honours the key",
            EffectClass::UnkeyedRemote => "duplicate-visible: never a silent duplicate",
        }
    }
}

/// A job handler: the code that runs jobs of one kind.
pub trait Handler: Send + Sync + 'static {
    /// The job kind this handler runs.
    const KIND: &'static str;
    /// What the handler's effect is.
    const EFFECT: EffectClass;
    /// The job's arguments, decoded from its JSON `args`.
    type Args: DeserializeOwned + Send + 'static;

    /// Runs one attempt. Return `Ok(())` to complete the job (if the handler did not
    /// already complete it inside its effect transaction) or a [`JobError`].
    fn run(
        &self,
        cx: &mut JobContext,
        args: Self::Args,
    ) -> impl Future<Output = Result<(), JobError>> + Send;

    /// How long one attempt of this kind may run before it is stopped (its future
    /// dropped, an open effect transaction rolled back) and counted as failed; `None`
    /// (the default) = the worker's `job_timeout`. Checked when the handler is
    /// registered: at most the worker's `job_timeout`, which the retry horizon counts.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// How many attempts a job of this kind gets at most; `None` (the default) = the
    /// worker's `max_attempts` (and the job's own, whichever is lower). Checked when the
    /// handler is registered: 1 to the worker's `max_attempts`.
    fn max_attempts(&self) -> Option<i32> {
        None
    }

    /// For a remote effect: how long its call may take, from which its intents' lease
    /// follows ([`IntentPolicy`]). Checked when the handler is registered.
    fn intent_policy(&self) -> IntentPolicy {
        IntentPolicy::default()
    }

    /// For an `UnkeyedRemote` effect: looks the call that `intent` stands for up on the
    /// remote by its reference (the intent's key), for reconciliation and the audit.
    /// [`Lookup::of_copies`] turns a list of the remote's copies into the answer. The
    /// default cannot tell, which parks unknown outcomes for an operator.
    fn lookup(&self, intent: &IntentRow, args: Self::Args) -> impl Future<Output = Lookup> + Send {
        let _ = args;
        let why = format!(
            "job kind {:?} has no lookup for intent {:?}",
            Self::KIND,
            intent.key
        );
        async move { Lookup::CannotTell(why) }
    }
}

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A registered handler with its types erased.
pub(crate) trait ErasedHandler: Send + Sync {
    fn effect(&self) -> EffectClass;
    fn limits(&self) -> KindLimits;
    /// Decodes `job`'s args and looks `intent`'s call up (see [`Handler::lookup`]).
    fn lookup(self: Arc<Self>, intent: IntentRow, job: JobRow) -> BoxFuture<Lookup>;
    /// Decodes the job's args (read in place from the context's row, not copied) and
    /// runs the handler.
    fn call(self: Arc<Self>, cx: JobContext) -> BoxFuture<(JobContext, Result<(), JobError>)>;
}

/// The limits a handler declared for its kind ([`Handler::timeout`],
/// [`Handler::max_attempts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KindLimits {
    pub(crate) timeout: Option<Duration>,
    pub(crate) max_attempts: Option<i32>,
}

/// A handler with the intent policy and limits it had when registered (asked once, not
/// per job).
pub(crate) struct Registered<H> {
    pub(crate) handler: H,
    pub(crate) policy: IntentPolicy,
    pub(crate) limits: KindLimits,
}

impl<H: Handler> ErasedHandler for Registered<H> {
    fn effect(&self) -> EffectClass {
        H::EFFECT
    }

    fn limits(&self) -> KindLimits {
        self.limits
    }

    fn lookup(self: Arc<Self>, intent: IntentRow, job: JobRow) -> BoxFuture<Lookup> {
        Box::pin(async move {
            match H::Args::deserialize(&job.args) {
                Ok(args) => self.handler.lookup(&intent, args).await,
                Err(e) => Lookup::CannotTell(format!(
                    "args of job {} (kind {:?}) do not decode: {e}",
                    job.id,
                    H::KIND
                )),
            }
        })
    }

    fn call(self: Arc<Self>, mut cx: JobContext) -> BoxFuture<(JobContext, Result<(), JobError>)> {
        cx.effect = H::EFFECT;
        cx.intent_policy = self.policy;
        Box::pin(async move {
            let args: H::Args = match H::Args::deserialize(&cx.job().args) {
                Ok(a) => a,
                Err(e) => {
                    let msg = format!("args of job kind {:?} do not decode: {e}", H::KIND);
                    return (cx, Err(JobError::permanent(msg)));
                }
            };
            let out = self.handler.run(&mut cx, args).await;
            (cx, out)
        })
    }
}
