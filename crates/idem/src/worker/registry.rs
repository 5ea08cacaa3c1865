//! [`Worker`]: a worker being configured, its handlers registered by kind before it
//! starts, and the name it records as `lease_owner`.
//!
//! What must stay true: a worker is built only from a config that passed `validate`;
//! each kind has at most one handler, and kind names pass the same check as an
//! enqueue's; the handlers are fixed once the worker starts.

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng;

use super::WorkerConfig;
use crate::client::Idem;
use crate::cron::Periodic;
use crate::error::IdemError;
use crate::handler::{EffectClass, ErasedHandler, Handler, KindLimits, Registered};
use crate::job::check_name;

/// A worker being configured; [`Worker::start`] runs it.
pub struct Worker {
    pub(super) idem: Idem,
    pub(super) config: WorkerConfig,
    pub(super) name: String,
    pub(super) handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    pub(super) periodic: Vec<Arc<Periodic>>,
}

impl Worker {
    pub(crate) fn new(idem: Idem, config: WorkerConfig) -> Result<Worker, IdemError> {
        config.validate()?;
        let name = config.name.clone().unwrap_or_else(default_name);
        Ok(Worker {
            idem,
            config,
            name,
            handlers: HashMap::new(),
            periodic: Vec::new(),
        })
    }

    /// Registers a handler for its kind; a kind registered twice is refused.
    pub fn register<H: Handler>(&mut self, handler: H) -> Result<&mut Self, IdemError> {
        check_name("kind", H::KIND).map_err(|e| IdemError::Config(e.to_string()))?;
        if self.handlers.contains_key(H::KIND) {
            return Err(IdemError::Config(format!(
                "a handler for kind {:?} is already registered on this worker",
                H::KIND
            )));
        }
        let policy = handler.intent_policy();
        if H::EFFECT != EffectClass::Transactional {
            policy.check(H::KIND)?;
        }
        let limits = KindLimits {
            timeout: handler.timeout(),
            max_attempts: handler.max_attempts(),
        };
        self.check_limits(H::KIND, limits)?;
        let registered = Registered {
            handler,
            policy,
            limits,
        };
        self.handlers
            .insert(H::KIND.to_owned(), Arc::new(registered));
        Ok(self)
    }

    /// A kind's limits may only tighten the worker's: the retry horizon, which the
    /// retention windows are checked against, counts the worker's timeout and attempts.
    fn check_limits(&self, kind: &str, limits: KindLimits) -> Result<(), IdemError> {
        let job_timeout = self.config.job_timeout;
        if let Some(t) = limits.timeout
            && (t.is_zero() || t > job_timeout)
        {
            return Err(IdemError::Config(format!(
                "the handler of kind {kind:?} declares a timeout of {t:?}; it must be above \
                 zero and at most the worker's job_timeout ({job_timeout:?}); raise \
                 job_timeout for a longer one"
            )));
        }
        let max = self.config.max_attempts;
        if let Some(n) = limits.max_attempts
            && !(1..=max).contains(&n)
        {
            return Err(IdemError::Config(format!(
                "the handler of kind {kind:?} declares max_attempts {n}; it must be 1 to the \
                 worker's max_attempts ({max}); raise max_attempts for more"
            )));
        }
        Ok(())
    }

    /// Enqueues `p`'s job at each of its ticks while the worker runs. Every worker
    /// process may run the same schedule: each tick is enqueued once (its enqueue key);
    /// a name registered twice is refused.
    pub fn periodic(&mut self, p: Periodic) -> Result<&mut Self, IdemError> {
        if self.periodic.iter().any(|q| q.name() == p.name()) {
            return Err(IdemError::Config(format!(
                "a periodic job named {:?} is already registered on this worker",
                p.name()
            )));
        }
        let window = self.idem.retention().enqueue_keys;
        if p.catch_up_window() >= window {
            return Err(IdemError::Config(format!(
                "periodic {:?} catches up {} of missed ticks, not less than the enqueue-key \
                 window ({}): a tick whose key was purged could be enqueued again; shorten \
                 catch_up or lengthen retention.enqueue_keys",
                p.name(),
                crate::config::human(p.catch_up_window()),
                crate::config::human(window)
            )));
        }
        self.periodic.push(Arc::new(p));
        Ok(self)
    }

    /// A reconciler for this worker's kinds: it looks unknown outcomes up through their
    /// handlers' [`Handler::lookup`].
    pub fn reconciler(&self) -> crate::intent::Reconciler {
        crate::intent::Reconciler::new(self.idem.clone(), self.handlers.clone())
    }

    /// The worker's name (its `lease_owner`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registered kinds with their effect classes, sorted by kind.
    pub fn kinds(&self) -> Vec<(String, EffectClass)> {
        let mut kinds: Vec<_> = self
            .handlers
            .iter()
            .map(|(k, h)| (k.clone(), h.effect()))
            .collect();
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        kinds
    }
}

/// The default worker name: host, pid and a random 64-bit instance id, unique even
/// where replicas share a host name and a pid (containers started from one image).
fn default_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let instance: u64 = rand::rng().random();
    format!("{host}-{}-{instance:016x}", std::process::id())
}
