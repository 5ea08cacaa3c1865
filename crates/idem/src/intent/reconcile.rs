//! Reconciliation: settling intents whose outcome is unknown by looking the call up on
//! the remote, and the audit that looks completed unkeyed calls up again so a late
//! duplicate (sent by a paused holder that woke after losing its lease) is made visible.
//!
//! What must stay true: an unknown call is never sent again until the remote has been
//! asked and said *absent*, and only after a settle delay (a call still in flight there
//! must have landed); *cannot tell* parks the intent as `manual` for an operator, never
//! re-sent automatically; *duplicate* records every copy and never picks one. Every
//! resolution is conditional on the state and fence the reconciler read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use idem_store::{IntentList, IntentResolution, IntentResolve, IntentRow, IntentState, StoreError};
use serde::Serialize;

use crate::client::Idem;
use crate::error::IdemError;
use crate::handler::ErasedHandler;

/// What the remote says about a call, looked up by its reference (the intent's key).
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Applied once: the remote's id, and the result to store.
    Applied {
        /// The remote's id(s) for the one copy.
        remote_refs: Vec<String>,
        /// The result handed to the job in place of a call.
        result: serde_json::Value,
    },
    /// Not applied: it may be sent again, with the same reference.
    Absent,
    /// Applied two or more times: every copy's id.
    Duplicate {
        /// Every copy's id.
        remote_refs: Vec<String>,
    },
    /// The remote could not say (unreachable, no lookup for this kind): an operator
    /// decides.
    CannotTell(String),
}

impl Lookup {
    /// The answer for the copies a remote lists under one reference.
    pub fn of_copies(ids: Vec<String>) -> Lookup {
        match ids.len() {
            0 => Lookup::Absent,
            1 => Lookup::Applied {
                result: serde_json::json!({"reconciled": "applied", "remote_refs": ids}),
                remote_refs: ids,
            },
            _ => Lookup::Duplicate { remote_refs: ids },
        }
    }
}

/// How a reconciliation pass behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// How long after an intent last changed before an *absent* answer is trusted (a
    /// call still in flight must have landed) and before a completed unkeyed call is
    /// audited (default 1 min).
    pub settle: Duration,
    /// How far back the audit looks: completed unkeyed intents created within this
    /// window (default 3 days, the intent retention).
    pub audit_window: Duration,
    /// Intents read per page (default 1,000); a pass reads every page.
    pub limit: u32,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            settle: Duration::from_secs(60),
            audit_window: crate::config::DEFAULT_RETENTION,
            limit: 1000,
        }
    }
}

/// What a reconciliation pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Unknown intents looked up.
    pub looked_up: u64,
    /// Found applied once: completed.
    pub applied: u64,
    /// Found absent after the settle delay: deleted, so the job sends again.
    pub absent: u64,
    /// Found absent before the settle delay: left for a later pass.
    pub settling: u64,
    /// Found applied more than once: marked duplicate.
    pub duplicates: u64,
    /// The remote could not tell: parked as manual.
    pub manual: u64,
    /// Of a kind this process has no handler for: left alone.
    pub skipped: u64,
    /// Resolved by someone else meanwhile (state or fence moved on).
    pub raced: u64,
    /// Completed unkeyed intents looked up again by the audit.
    pub audited: u64,
    /// Of those, found applied more than once: marked duplicate.
    pub audit_duplicates: u64,
    /// Dead jobs put back to run once their intent was settled.
    pub jobs_retried: u64,
}

impl ReconcileReport {
    /// Adds the counts of `other` (a later pass) to these.
    pub fn absorb(&mut self, other: &ReconcileReport) {
        let pairs = [
            (&mut self.looked_up, other.looked_up),
            (&mut self.applied, other.applied),
            (&mut self.absent, other.absent),
            (&mut self.settling, other.settling),
            (&mut self.duplicates, other.duplicates),
            (&mut self.manual, other.manual),
            (&mut self.skipped, other.skipped),
            (&mut self.raced, other.raced),
            (&mut self.audited, other.audited),
            (&mut self.audit_duplicates, other.audit_duplicates),
            (&mut self.jobs_retried, other.jobs_retried),
        ];
        for (mine, theirs) in pairs {
            *mine += theirs;
        }
    }

    /// Whether the pass changed anything (settled an intent or retried a job).
    pub fn acted(&self) -> bool {
        self.applied + self.absent + self.duplicates + self.manual + self.audit_duplicates > 0
    }
}

/// Which intents a pass reads, a page at a time in key order.
struct Page {
    state: IntentState,
    updated_before: Option<idem_store::Timestamp>,
    created_since: Option<idem_store::Timestamp>,
    after: Option<String>,
    limit: u32,
}

impl Page {
    fn new(
        state: IntentState,
        updated_before: Option<idem_store::Timestamp>,
        created_since: Option<idem_store::Timestamp>,
        limit: u32,
    ) -> Page {
        Page {
            state,
            updated_before,
            created_since,
            after: None,
            limit: limit.max(1),
        }
    }
}

/// Runs reconciliation for the job kinds of one worker.
#[derive(Clone)]
pub struct Reconciler {
    idem: Idem,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<&String> = self.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("Reconciler").field("kinds", &kinds).finish()
    }
}

impl Reconciler {
    pub(crate) fn new(idem: Idem, handlers: HashMap<String, Arc<dyn ErasedHandler>>) -> Self {
        Reconciler { idem, handlers }
    }

    /// One pass: every `unknown` intent is looked up and settled, then completed unkeyed
    /// intents inside the audit window are looked up again.
    pub async fn run(&self, opts: ReconcileOptions) -> Result<ReconcileReport, IdemError> {
        let mut report = ReconcileReport::default();
        let now = self.idem.now().await?;
        let settled_before = before(now, opts.settle)?;
        let unknown = Page::new(IntentState::Unknown, None, None, opts.limit);
        let mut next = Some(unknown);
        while let Some(page) = next {
            let (rows, more) = self.page(page).await?;
            for row in rows {
                self.settle_unknown(row, settled_before, &mut report)
                    .await?;
            }
            next = more;
        }
        let since = before(now, opts.audit_window)?;
        let audit = Page::new(
            IntentState::Completed,
            Some(settled_before),
            Some(since),
            opts.limit,
        );
        let mut next = Some(audit);
        while let Some(page) = next {
            let (rows, more) = self.page(page).await?;
            for row in rows {
                self.audit(row, &mut report).await?;
            }
            next = more;
        }
        crate::telemetry::metrics::reconciled(&report);
        Ok(report)
    }

    /// One page of intents in `page`'s state, and the page after it when this one was
    /// full. A pass reads every page, so intents it leaves (settling, of kinds without a
    /// handler here) never hide those behind them.
    async fn page(&self, page: Page) -> Result<(Vec<IntentRow>, Option<Page>), IdemError> {
        let params = IntentList {
            states: vec![page.state],
            unkeyed: (page.state == IntentState::Completed).then_some(true),
            updated_before: page.updated_before,
            created_since: page.created_since,
            after: page.after.clone(),
            limit: page.limit,
            ..IntentList::default()
        };
        let rows = self.idem.store.intent_list(params).await?;
        let more = match rows.last() {
            Some(last) if rows.len() == page.limit as usize => Some(Page {
                after: Some(last.key.clone()),
                ..page
            }),
            _ => None,
        };
        Ok((rows, more))
    }

    /// Looks the job's handler's call up; `None` when this process has no handler for
    /// the job's kind (or no job is left). When the intent's own job is gone (an operator
    /// discarded it), a job that awaited the intent (the same logical request) stands in
    /// for it, so the jobs awaiting the intent are not left dead for good.
    async fn lookup(&self, row: &IntentRow) -> Result<Option<Lookup>, IdemError> {
        let job = match self.idem.store.job_get(row.job_id).await? {
            Some(job) => Some(job),
            None => self.idem.store.job_awaiting(row.key.clone()).await?,
        };
        let Some(job) = job else {
            return Ok(None);
        };
        let Some(handler) = self.handlers.get(&job.kind) else {
            return Ok(None);
        };
        Ok(Some(handler.clone().lookup(row.clone(), job).await))
    }

    async fn settle_unknown(
        &self,
        row: IntentRow,
        settled_before: idem_store::Timestamp,
        report: &mut ReconcileReport,
    ) -> Result<(), IdemError> {
        let Some(found) = self.lookup(&row).await? else {
            report.skipped += 1;
            return Ok(());
        };
        report.looked_up += 1;
        let resolution = match found {
            Lookup::Applied {
                remote_refs,
                result,
            } => {
                report.applied += 1;
                IntentResolution::Applied {
                    result,
                    remote_refs,
                }
            }
            Lookup::Absent if row.updated_at >= settled_before => {
                report.settling += 1;
                return Ok(());
            }
            Lookup::Absent => {
                report.absent += 1;
                IntentResolution::Absent
            }
            Lookup::Duplicate { remote_refs } => {
                report.duplicates += 1;
                self.idem.metrics.duplicate_intent();
                tracing::warn!(key = %row.key, copies = ?remote_refs, "duplicate remote effect");
                IntentResolution::Duplicate { remote_refs }
            }
            Lookup::CannotTell(why) => {
                report.manual += 1;
                IntentResolution::Manual { error: why }
            }
        };
        let from = vec![IntentState::Unknown];
        let back = self.resolve(&row, from, resolution, report);
        report.jobs_retried += back.await?.unwrap_or(0) as u64;
        Ok(())
    }

    async fn audit(&self, row: IntentRow, report: &mut ReconcileReport) -> Result<(), IdemError> {
        let Some(found) = self.lookup(&row).await? else {
            report.skipped += 1;
            return Ok(());
        };
        report.audited += 1;
        if let Lookup::Duplicate { remote_refs } = found {
            report.audit_duplicates += 1;
            self.idem.metrics.duplicate_intent();
            tracing::warn!(key = %row.key, copies = ?remote_refs, "late duplicate remote effect");
            let resolution = IntentResolution::Duplicate { remote_refs };
            let from = vec![IntentState::Completed];
            self.resolve(&row, from, resolution, report).await?;
        }
        Ok(())
    }

    /// Resolves from what was read, putting the dead jobs awaiting the intent back to run
    /// in the same transaction (see [`Idem::settle_intent`]); how many jobs were put
    /// back, or `None` when someone else resolved the intent meanwhile.
    async fn resolve(
        &self,
        row: &IntentRow,
        from: Vec<IntentState>,
        resolution: IntentResolution,
        report: &mut ReconcileReport,
    ) -> Result<Option<usize>, IdemError> {
        let params = IntentResolve {
            token: row.token(),
            from,
            resolution,
            now: self.idem.clock.now(),
        };
        match self.idem.settle_intent(params).await {
            Ok((_, back)) => Ok(Some(back)),
            Err(StoreError::Conflict(_) | StoreError::NotFound { .. }) => {
                report.raced += 1;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// `now - d`, refused when `d` reaches past the calendar (a settle or window of ages).
fn before(now: idem_store::Timestamp, d: Duration) -> Result<idem_store::Timestamp, IdemError> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| IdemError::Config(format!("{} is too long", crate::config::human(d))))
}
