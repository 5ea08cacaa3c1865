//! A model test of the intent state machine (`intent_begin`, `intent_renew`,
//! `intent_finish`, `intent_resolve`): random interleavings, on one key, of three holders
//! (each a running claim of a job of its own) beginning, renewing and finishing the
//! intent, a reconciler resolving it from what it reads, and an injected clock moving on
//! by up to three leases at a time. Whether the intent is unkeyed is drawn once per case.
//!
//! After every step it holds the store to these rules:
//! 1. **At most one holder believes it holds a live lease**: a holder's belief is the
//!    lease end of its last successful begin or renew, forgotten once its outcome is
//!    recorded or a write of it is `IntentLost`; at most one belief is `>= now`, and the
//!    row agrees with it (in progress, under that holder's fence, with that lease).
//! 2. **Fences handed out by `Begun` strictly increase** over the whole run, past every
//!    fence the row ever showed (across releases, `absent` resolutions and takeovers).
//! 3. **A completed result is never lost**: once an outcome or a resolution recorded a
//!    result, every begin answers `Completed` with it, and the row stays `completed` (or
//!    `duplicate`) with it.
//! 4. **A write under a fence other than the row's is `IntentLost`** and changes nothing;
//!    no refused write (`IntentLost`, or a resolution's `Conflict`) changes the row.
//! 5. **An unkeyed intent whose holder's lease lapsed without an outcome is never `Begun`
//!    again**: the next begin answers `Reconcile`, with the row `unknown`.
//!
//! SQLite runs [`SQLITE_CASES`] cases always; PostgreSQL runs [`PG_CASES`] when
//! `IDEM_TEST_PG_URL` is set (skipped with a notice otherwise, a failure under `CI`).
//! `PROPTEST_CASES` overrides both. Each case owns a fresh database. A failure prints the
//! shrunk scenario, the rule it broke and the trace of the store's answers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;

use idem_store::testing::{PgUrlChoice, pg_url_from_env};
use idem_store::{
    IntentBegin, IntentBegun, IntentFinish, IntentOutcome, IntentRenew, IntentResolution,
    IntentResolve, IntentRow, IntentState, IntentToken, LeaseToken, StoreError, StoreResult,
    Timestamp,
};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{at, job_in, running, t0};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{Value, json};

/// The one key every case contends for.
const KEY: &str = "pay:model";
/// The one fingerprint of every begin.
const FP: &str = "fp-model";
/// The lease every begin and renewal asks for, in milliseconds.
const LEASE_MS: i64 = 10_000;
/// How many holders contend.
const HOLDERS: usize = 3;
/// The most steps a case takes.
const MAX_STEPS: usize = 40;
/// Where the injected clock starts, in milliseconds after `t0`.
const START_MS: i64 = 1_000;
/// Cases on SQLite.
const SQLITE_CASES: u32 = 48;
/// Cases on PostgreSQL.
const PG_CASES: u32 = 16;
/// What the reconciler resolves from.
const OPEN: [IntentState; 2] = [IntentState::Unknown, IntentState::Manual];

/// A check's verdict; `Err` names the broken rule.
type Checked<T = ()> = Result<T, TestCaseError>;

/// What the reconciler found at the remote.
#[derive(Debug, Clone)]
enum Found {
    Applied(u8),
    Absent,
    Duplicate,
    Manual,
}

/// One step of a case. Holders are `0..HOLDERS`; a holder's writes carry the token of its
/// last `Begun` (none yet: the step does nothing).
#[derive(Debug, Clone)]
enum Op {
    Begin(usize),
    Renew(usize),
    Complete(usize, u8),
    Release(usize),
    Unknown(usize),
    Resolve(Found),
    Advance(Step),
}

/// How far the clock moves: always forward, by at most three leases.
#[derive(Debug, Clone)]
enum Step {
    /// By this many milliseconds.
    By(i64),
    /// To the end of the intent's lease (when that is later than now): the last instant
    /// the lease is live.
    ToLeaseEnd,
    /// To 1 ms past the end of the intent's lease: the first instant it has lapsed.
    PastLeaseEnd,
}

/// One case: keyed or unkeyed, and its steps.
#[derive(Debug, Clone)]
struct Scenario {
    unkeyed: bool,
    ops: Vec<Op>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let ops = proptest::collection::vec(op(), 1..=MAX_STEPS);
    (any::<bool>(), ops).prop_map(|(unkeyed, ops)| Scenario { unkeyed, ops })
}

fn op() -> impl Strategy<Value = Op> {
    let holder = || 0..HOLDERS;
    prop_oneof![
        5 => holder().prop_map(Op::Begin),
        2 => holder().prop_map(Op::Renew),
        1 => (holder(), any::<u8>()).prop_map(|(h, n)| Op::Complete(h, n)),
        2 => holder().prop_map(Op::Release),
        2 => holder().prop_map(Op::Unknown),
        3 => found().prop_map(Op::Resolve),
        4 => advance().prop_map(Op::Advance),
    ]
}

fn found() -> impl Strategy<Value = Found> {
    prop_oneof![
        any::<u8>().prop_map(Found::Applied),
        Just(Found::Absent),
        Just(Found::Duplicate),
        Just(Found::Manual),
    ]
}

/// 1 ms to three leases, or to the edge of the intent's lease: a lease that ends exactly
/// `now` is still live, one that ended 1 ms ago has lapsed, and both are met often.
fn advance() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1..=3 * LEASE_MS).prop_map(Step::By),
        1 => Just(Step::By(1)),
        1 => Just(Step::ToLeaseEnd),
        1 => Just(Step::PastLeaseEnd),
    ]
}

impl Found {
    /// The resolution to record, and the result it stores (if any).
    fn resolution(&self) -> (IntentResolution, Option<Value>) {
        match self {
            Found::Applied(n) => {
                let result = json!({ "resolved": n });
                let remote_refs = vec![format!("ch_r{n}")];
                let applied = IntentResolution::Applied {
                    result: result.clone(),
                    remote_refs,
                };
                (applied, Some(result))
            }
            Found::Absent => (IntentResolution::Absent, None),
            Found::Duplicate => {
                let remote_refs = vec!["ch_a".to_owned(), "ch_b".to_owned()];
                (IntentResolution::Duplicate { remote_refs }, None)
            }
            Found::Manual => {
                let error = "the remote cannot tell".to_owned();
                (IntentResolution::Manual { error }, None)
            }
        }
    }
}

/// One holder: a running job claim, and what it believes.
struct Holder {
    job: LeaseToken,
    /// The token of its last `Begun`.
    token: Option<IntentToken>,
    /// When the lease it believes it holds ends.
    lease_end: Option<Timestamp>,
}

/// What the holders and the reconciler know, and what the rules compare the store with.
struct Model {
    unkeyed: bool,
    /// The injected clock, in milliseconds after `t0`.
    now: i64,
    holders: Vec<Holder>,
    /// The highest fence a `Begun` handed out or the row showed.
    top_fence: i64,
    /// The result recorded as applied (a holder's completion or an `applied` resolution).
    result: Option<Value>,
    /// The lease of the intent in progress, as its holders set it; `None` once an
    /// outcome, a resolution or an unkeyed takeover ended it.
    lease: Option<Timestamp>,
    /// What each step answered, for the failure message.
    trace: Vec<String>,
    /// How often each notable transition happened, to show the rules were exercised.
    seen: BTreeMap<&'static str, u32>,
}

/// Milliseconds after `t0`, for messages.
fn ms(t: Timestamp) -> i64 {
    (t - t0()).num_milliseconds()
}

fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

/// A store call that must not fail.
fn ok<T>(result: StoreResult<T>, what: &str) -> Checked<T> {
    result.map_err(|e| fail(format!("{what} failed unexpectedly: {e}")))
}

/// A short account of a begin's answer.
fn summary(answer: &IntentBegun) -> String {
    let kind = match answer {
        IntentBegun::Begun(_) => "Begun",
        IntentBegun::InProgress(_) => "InProgress",
        IntentBegun::Completed(_) => "Completed",
        IntentBegun::Failed(_) => "Failed",
        IntentBegun::Reconcile(_) => "Reconcile",
        IntentBegun::Mismatch(_) => "Mismatch",
    };
    let row = answer.row();
    format!("{kind} ({} at fence {})", row.state, row.fence)
}

impl Model {
    /// Three running claims, of jobs of their own, and nothing begun.
    async fn new(db: &TestDb, unkeyed: bool) -> Model {
        let mut holders = Vec::new();
        for h in 0..HOLDERS {
            let job = running(db, job_in(&format!("model-{h}"), "charge"), t0()).await;
            let job = job.lease_token();
            holders.push(Holder {
                job,
                token: None,
                lease_end: None,
            });
        }
        Model {
            unkeyed,
            now: START_MS,
            holders,
            top_fence: 0,
            result: None,
            lease: None,
            trace: Vec::new(),
            seen: BTreeMap::new(),
        }
    }

    fn now(&self) -> Timestamp {
        at(self.now)
    }

    fn saw(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    async fn read(&self, db: &TestDb) -> Checked<Option<IntentRow>> {
        ok(db.store.intent_get(KEY.to_owned()).await, "intent_get")
    }

    /// Runs one step; what it answered goes to the trace.
    async fn step(&mut self, db: &TestDb, op: &Op) -> Checked {
        let answer = match op {
            Op::Begin(h) => self.begin(db, *h).await?,
            Op::Renew(h) => self.renew(db, *h).await?,
            Op::Complete(h, n) => self.finish(db, *h, completed(*h, *n)).await?,
            Op::Release(h) => self.finish(db, *h, IntentOutcome::Released).await?,
            Op::Unknown(h) => {
                let error = "timed out".to_owned();
                self.finish(db, *h, IntentOutcome::Unknown { error })
                    .await?
            }
            Op::Resolve(found) => self.resolve(db, found).await?,
            Op::Advance(step) => self.advance(step),
        };
        let line = format!("{:>7} ms  {op:?}  {answer}", self.now);
        self.trace.push(line);
        Ok(())
    }

    /// Moves the clock forward by `step`.
    fn advance(&mut self, step: &Step) -> String {
        let lease_end = self.lease.map(ms);
        let to = match step {
            Step::By(by) => Some(self.now + by),
            Step::ToLeaseEnd => lease_end,
            Step::PastLeaseEnd => lease_end.map(|end| end + 1),
        };
        match to {
            Some(to) if to > self.now => {
                self.now = to;
                String::new()
            }
            _ => "(no lease ahead)".to_owned(),
        }
    }

    /// A begin by holder `h`'s claim; checks rules 2, 3 and 5 on its answer.
    async fn begin(&mut self, db: &TestDb, h: usize) -> Checked<String> {
        let lapsed = self.unkeyed && self.lease.is_some_and(|end| end < self.now());
        let params = IntentBegin {
            key: KEY.to_owned(),
            fingerprint: FP.to_owned(),
            unkeyed: self.unkeyed,
            lease_ms: LEASE_MS,
            job: self.holders[h].job,
            now: Some(self.now()),
        };
        let answer = ok(db.store.intent_begin(params).await, "intent_begin")?;
        let text = summary(&answer);
        self.check_completed_answer(&answer)?;
        if lapsed {
            let reconcile =
                matches!(&answer, IntentBegun::Reconcile(r) if r.state == IntentState::Unknown);
            prop_assert!(
                reconcile,
                "rule 5: holder {h} began the unkeyed intent after its lease lapsed without \
                 an outcome and was answered {answer:?}, not Reconcile (unknown)"
            );
            self.saw("unkeyed lapse reconciled");
        }
        self.answered(h, answer)?;
        Ok(text)
    }

    /// Rule 3 on a begin's answer.
    fn check_completed_answer(&self, answer: &IntentBegun) -> Checked {
        let Some(result) = &self.result else {
            return Ok(());
        };
        let kept = matches!(answer, IntentBegun::Completed(r) if r.result.as_ref() == Some(result));
        prop_assert!(
            kept,
            "rule 3: the intent was completed with {result}, but a begin answered {answer:?}"
        );
        Ok(())
    }

    /// What the holder and the model learn from a begin's answer.
    fn answered(&mut self, h: usize, answer: IntentBegun) -> Checked {
        match answer {
            IntentBegun::Begun(row) => self.begun(h, row),
            IntentBegun::Reconcile(_) => {
                self.lease = None;
                Ok(())
            }
            IntentBegun::Mismatch(row) => Err(fail(format!(
                "a begin with the run's one fingerprint was a Mismatch: {row:?}"
            ))),
            IntentBegun::Completed(_) if self.result.is_some() => {
                self.saw("completed answered");
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Rule 2 on a `Begun`; holder `h` now believes it holds the lease.
    fn begun(&mut self, h: usize, row: IntentRow) -> Checked {
        prop_assert!(
            row.fence > self.top_fence,
            "rule 2: Begun handed fence {} to holder {h}, but fence {} was handed out or \
             shown before",
            row.fence,
            self.top_fence
        );
        if row.attempt > 1 {
            self.saw("begun again");
        }
        self.top_fence = row.fence;
        self.lease = row.lease_expires_at;
        let holder = &mut self.holders[h];
        holder.token = Some(row.token());
        holder.lease_end = row.lease_expires_at;
        Ok(())
    }

    /// Holder `h` renews the token of its last `Begun`.
    async fn renew(&mut self, db: &TestDb, h: usize) -> Checked<String> {
        let Some(token) = self.holders[h].token.clone() else {
            return Ok("(nothing begun)".to_owned());
        };
        let before = self.read_held(db).await?;
        let params = IntentRenew {
            token: token.clone(),
            lease_ms: LEASE_MS,
            now: Some(self.now()),
        };
        match db.store.intent_renew(params).await {
            Ok(row) => {
                self.accepted(&before, &token)?;
                self.lease = row.lease_expires_at;
                self.holders[h].lease_end = row.lease_expires_at;
                let end = row.lease_expires_at.map(ms);
                Ok(format!("renewed fence {} to {end:?}", token.fence))
            }
            Err(e) => self.refused(db, h, &token, before, e).await,
        }
    }

    /// Holder `h` records `outcome` under the token of its last `Begun`.
    async fn finish(&mut self, db: &TestDb, h: usize, outcome: IntentOutcome) -> Checked<String> {
        let Some(token) = self.holders[h].token.clone() else {
            return Ok("(nothing begun)".to_owned());
        };
        let before = self.read_held(db).await?;
        let result = match &outcome {
            IntentOutcome::Completed { result, .. } => Some(result.clone()),
            _ => None,
        };
        let params = IntentFinish {
            token: token.clone(),
            outcome,
            now: Some(self.now()),
        };
        match db.store.intent_finish(params).await {
            Ok(row) => {
                self.accepted(&before, &token)?;
                self.lease = None;
                self.holders[h].lease_end = None;
                self.result = result.or(self.result.take());
                Ok(format!("finished fence {}: {}", token.fence, row.state))
            }
            Err(e) => self.refused(db, h, &token, before, e).await,
        }
    }

    /// The row a holder's write is about to change; it exists, as the holder began it.
    async fn read_held(&self, db: &TestDb) -> Checked<IntentRow> {
        let row = self.read(db).await?;
        row.ok_or_else(|| fail("the intent a holder began is gone".to_owned()))
    }

    /// Rule 4 on a write that succeeded: it carried the row's fence.
    fn accepted(&self, before: &IntentRow, token: &IntentToken) -> Checked {
        prop_assert_eq!(
            token.fence,
            before.fence,
            "rule 4: a write under fence {} succeeded while the row was at fence {}: {:?}",
            token.fence,
            before.fence,
            before
        );
        Ok(())
    }

    /// Rule 4 on a write that failed: `IntentLost` naming the token, and nothing changed.
    async fn refused(
        &mut self,
        db: &TestDb,
        h: usize,
        token: &IntentToken,
        before: IntentRow,
        e: StoreError,
    ) -> Checked<String> {
        let StoreError::IntentLost { key, fence } = e else {
            let f = token.fence;
            return Err(fail(format!(
                "holder {h}'s write under fence {f} failed: {e}"
            )));
        };
        prop_assert_eq!((key.as_str(), fence), (token.key.as_str(), token.fence));
        self.holders[h].lease_end = None;
        let after = self.read(db).await?;
        prop_assert_eq!(
            after.as_ref(),
            Some(&before),
            "rule 4: a write refused as IntentLost changed the row"
        );
        if token.fence != before.fence {
            self.saw("stale write refused");
        }
        Ok(format!(
            "IntentLost (fence {} vs row {})",
            token.fence, before.fence
        ))
    }

    /// The reconciler reads the row and resolves it from what it read.
    async fn resolve(&mut self, db: &TestDb, found: &Found) -> Checked<String> {
        let Some(read) = self.read(db).await? else {
            return Ok("(no intent)".to_owned());
        };
        let (resolution, result) = found.resolution();
        let params = IntentResolve {
            token: read.token(),
            from: OPEN.to_vec(),
            resolution,
            now: Some(self.now()),
        };
        match db.store.intent_resolve(params).await {
            Ok(row) => self.resolved(&read, row, result),
            Err(StoreError::Conflict(why)) => self.unresolved(db, read, why).await,
            Err(e) => Err(fail(format!("intent_resolve failed unexpectedly: {e}"))),
        }
    }

    fn resolved(
        &mut self,
        read: &IntentRow,
        row: IntentRow,
        result: Option<Value>,
    ) -> Checked<String> {
        prop_assert!(
            OPEN.contains(&read.state),
            "resolved an intent read {}, not one of {OPEN:?}",
            read.state
        );
        prop_assert_eq!(
            row.fence,
            read.fence + 1,
            "a resolution moves the fence on by one"
        );
        self.lease = None;
        self.result = result.or(self.result.take());
        self.saw("resolved");
        Ok(format!(
            "resolved {} to {} at fence {}",
            read.state, row.state, row.fence
        ))
    }

    /// A `Conflict` is right only when the row read was not open to resolution; either
    /// way it changed nothing.
    async fn unresolved(&mut self, db: &TestDb, read: IntentRow, why: String) -> Checked<String> {
        prop_assert!(
            !OPEN.contains(&read.state),
            "a resolution from the state and fence just read was refused: {why}"
        );
        let after = self.read(db).await?;
        prop_assert_eq!(
            after.as_ref(),
            Some(&read),
            "a refused resolution changed the row"
        );
        Ok(format!("Conflict ({} at fence {})", read.state, read.fence))
    }

    /// The rules that hold between steps: 1 and 3 on the row, and its fence never goes back.
    async fn check(&mut self, db: &TestDb) -> Checked {
        let row = self.read(db).await?;
        if let Some(row) = &row {
            prop_assert!(
                row.fence >= self.top_fence,
                "rule 2: the row's fence went back from {} to {}",
                self.top_fence,
                row.fence
            );
            self.top_fence = row.fence;
        }
        self.check_result(row.as_ref())?;
        self.check_live_leases(row.as_ref())
    }

    /// Rule 3 on the row.
    fn check_result(&self, row: Option<&IntentRow>) -> Checked {
        let Some(result) = &self.result else {
            return Ok(());
        };
        let applied = [IntentState::Completed, IntentState::Duplicate];
        let kept =
            row.is_some_and(|r| applied.contains(&r.state) && r.result.as_ref() == Some(result));
        prop_assert!(
            kept,
            "rule 3: the result {result} is lost: the row is {row:?}"
        );
        Ok(())
    }

    /// Rule 1: at most one holder believes it holds a live lease, and the row agrees.
    fn check_live_leases(&self, row: Option<&IntentRow>) -> Checked {
        let now = self.now();
        let live: Vec<usize> = (0..HOLDERS)
            .filter(|&h| self.holders[h].lease_end.is_some_and(|end| end >= now))
            .collect();
        let ends: Vec<Option<i64>> = self.holders.iter().map(|h| h.lease_end.map(ms)).collect();
        prop_assert!(
            live.len() <= 1,
            "rule 1: holders {live:?} each believe they hold a live lease (lease ends {ends:?})"
        );
        let Some(&h) = live.first() else {
            return Ok(());
        };
        let holder = &self.holders[h];
        let fence = holder.token.as_ref().map(|t| t.fence);
        let holds = row.is_some_and(|r| {
            r.state == IntentState::InProgress
                && Some(r.fence) == fence
                && r.lease_expires_at == holder.lease_end
        });
        prop_assert!(
            holds,
            "rule 1: holder {h} believes it holds fence {fence:?} to {:?}, but the row is {row:?}",
            holder.lease_end.map(ms)
        );
        Ok(())
    }

    /// `e` with the step, the clock and the trace so far.
    fn explain(&self, i: usize, op: &Op, e: TestCaseError) -> TestCaseError {
        let TestCaseError::Fail(reason) = e else {
            return e;
        };
        let kind = if self.unkeyed { "unkeyed" } else { "keyed" };
        fail(format!(
            "step {i} {op:?} at {} ms ({kind}): {}\ntrace:\n{}",
            self.now,
            reason.message(),
            self.trace.join("\n")
        ))
    }
}

/// A holder's completion: a result of its own.
fn completed(h: usize, n: u8) -> IntentOutcome {
    IntentOutcome::Completed {
        result: json!({ "holder": h, "n": n }),
        remote_refs: vec![format!("ch_{h}_{n}")],
    }
}

/// Runs one scenario on `db`, checking the rules after every step.
async fn run_scenario(
    db: &TestDb,
    s: &Scenario,
    seen: &RefCell<BTreeMap<&'static str, u32>>,
) -> Checked {
    let mut model = Model::new(db, s.unkeyed).await;
    for (i, op) in s.ops.iter().enumerate() {
        let checked = match model.step(db, op).await {
            Ok(()) => model.check(db).await,
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            return Err(model.explain(i, op, e));
        }
    }
    let mut total = seen.borrow_mut();
    for (what, n) in &model.seen {
        *total.entry(what).or_default() += n;
    }
    Ok(())
}

/// Runs the property on fresh databases from `open`, `cases` times (unless
/// `PROPTEST_CASES` says otherwise); panics with the shrunk scenario on a failure.
fn check_store<F, Fut>(name: &str, cases: u32, open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = TestDb>,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        max_shrink_iters: 1024,
        max_shrink_time: 120_000,
        failure_persistence: None,
        ..Config::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let seen = RefCell::new(BTreeMap::new());
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&scenario(), |s| {
        runtime.block_on(async {
            let db = open().await;
            let checked = run_scenario(&db, &s, &seen).await;
            db.cleanup().await;
            checked
        })
    });
    match outcome {
        Ok(()) => eprintln!(
            "{name}: {cases} cases passed; transitions seen: {:?}",
            seen.borrow()
        ),
        Err(TestError::Fail(why, s)) => {
            panic!("{name}: the intent model failed: {why}\nshrunk scenario: {s:#?}")
        }
        Err(TestError::Abort(why)) => panic!("{name}: the intent model aborted: {why}"),
    }
}

#[test]
fn sqlite_intent_model() {
    check_store("sqlite", SQLITE_CASES, TestDb::sqlite);
}

#[test]
fn postgres_intent_model() {
    let base = match pg_url_from_env() {
        PgUrlChoice::Use(url) => url,
        PgUrlChoice::Skip(notice) => {
            // Past the test harness's capture, so a plain `cargo test` shows it.
            let _ = writeln!(std::io::stderr(), "postgres_intent_model: {notice}");
            return;
        }
        PgUrlChoice::Fail(why) => panic!("{why}"),
    };
    check_store("postgres", PG_CASES, || TestDb::postgres_at(&base));
}
