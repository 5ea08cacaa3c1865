//! Group commit: the write transactions of several callers share one durable `COMMIT`.
//!
//! Each caller's transaction is a *member*: a `SAVEPOINT` inside one outer
//! `BEGIN IMMEDIATE` transaction, the *group*. Members run one after another (the
//! writer's turn orders them); a member that succeeds is released into the group and
//! waits for its `COMMIT` ([`Durable`]); one that fails is rolled back to its savepoint,
//! undoing only its own writes. The group commits when no other member is coming, when it
//! holds `max` members, or when its window has passed, and never while a member's
//! savepoint is open. A caller hears "committed" only after that `COMMIT` returned, so
//! what it was told survives exactly as a lone commit would; a crash loses the whole
//! unacknowledged group, and later groups commit after earlier ones, so a member that is
//! durable implies every member before it is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem_store::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::turns::{STARVING, Turns};
use super::waits::{Backoff, LockWaits, held_elsewhere, is_busy};
use crate::error::interpret_error;

/// How many members a group takes and for how long, and how long beginning one waits
/// for another process's write lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupLimits {
    pub(crate) max: usize,
    pub(crate) window: Duration,
    pub(crate) busy_timeout: Duration,
}

/// The write connection and the group open on it.
pub(crate) struct WriteConn {
    conn: Option<Connection>,
    group: Option<Group>,
    /// The group whose member has its savepoint open now.
    member: Option<u64>,
    next_id: u64,
    limits: GroupLimits,
    /// Set only while the group's own `COMMIT` runs: SQLite's commit hook refuses every
    /// other commit, so a statement that runs after an error ended the transaction (in
    /// autocommit) is rolled back, not kept behind a caller told "failed".
    committing: Arc<AtomicBool>,
    /// Rollbacks of a whole transaction so far (SQLite's rollback hook), and how many
    /// there had been when the open group began: a group survives none of them, even if
    /// a statement began another transaction after one.
    rollbacks: Arc<AtomicU64>,
    begun_after: u64,
    /// Turns with other processes on the file, and this process's waits for them.
    turns: Arc<Turns>,
    waits: Arc<LockWaits>,
    /// Since when beginning has failed for the busy timeout, until a begin succeeds: the
    /// transactions queued behind that one wait [`AFTER_TIMEOUT`] each, not as long again.
    stuck_since: Option<Instant>,
}

/// How long a begin waits for the write lock while the one before it gave up.
const AFTER_TIMEOUT: Duration = Duration::from_millis(100);

struct Group {
    id: u64,
    started: Instant,
    /// What each released member is told when the group's `COMMIT` returns.
    waiters: Vec<Waiter>,
}

type Waiter = Box<dyn FnOnce(StoreResult<()>) + Send>;

/// A member's place in its group: the group's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member(u64);

/// The pending result of the group commit a released member waits for.
pub(crate) struct Durable(oneshot::Receiver<StoreResult<()>>);

impl Durable {
    pub(crate) async fn wait(self) -> StoreResult<()> {
        self.0.await.map_err(|_| {
            StoreError::Unavailable(
                "the SQLite writer stopped before the group commit returned".into(),
            )
        })?
    }
}

impl WriteConn {
    pub(crate) fn new(
        conn: Connection,
        limits: GroupLimits,
        turns: Arc<Turns>,
        waits: Arc<LockWaits>,
    ) -> StoreResult<WriteConn> {
        let committing = Arc::new(AtomicBool::new(false));
        let allowed = committing.clone();
        conn.commit_hook(Some(move || !allowed.load(Ordering::SeqCst)))
            .map_err(interpret_error)?;
        let rollbacks = Arc::new(AtomicU64::new(0));
        let counted = rollbacks.clone();
        conn.rollback_hook(Some(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }))
        .map_err(interpret_error)?;
        Ok(WriteConn {
            conn: Some(conn),
            group: None,
            member: None,
            next_id: 1,
            limits,
            committing,
            rollbacks,
            begun_after: 0,
            turns,
            waits,
            stuck_since: None,
        })
    }

    /// The connection; `Unavailable` once closed.
    pub(crate) fn conn(&self) -> StoreResult<&Connection> {
        self.conn.as_ref().ok_or_else(super::closed)
    }

    /// Opens a member inside the open group, without beginning one (which may wait on
    /// another process's lock): `None` when no group is open.
    pub(crate) fn join(&mut self) -> StoreResult<Option<Member>> {
        self.drop_orphan();
        self.after_error();
        match &self.group {
            Some(g) => {
                let id = g.id;
                self.savepoint(id).map(Some)
            }
            None => Ok(None),
        }
    }

    /// Opens a member, beginning a group first if none is open.
    pub(crate) fn enter(&mut self) -> StoreResult<Member> {
        if let Some(m) = self.join()? {
            return Ok(m);
        }
        self.rollback_all(); // a transaction no group accounts for is an orphan
        self.begin()?;
        self.begun_after = self.rollbacks.load(Ordering::SeqCst);
        let id = self.next_id;
        self.next_id += 1;
        self.group = Some(Group {
            id,
            started: Instant::now(),
            waiters: Vec::new(),
        });
        self.savepoint(id)
    }

    /// `BEGIN IMMEDIATE`, tried again while another connection holds the file's write
    /// lock, up to the busy timeout (or [`AFTER_TIMEOUT`] while the begin before gave up
    /// after it); then `Busy`, naming the other process. A wait that grows long is
    /// marked, so the holder stands aside after its commit. Only this statement waits in
    /// idem's loop; SQLite's busy handler stays on for the rest (a `COMMIT` in a
    /// rollback-journal file waits for readers there).
    fn begin(&mut self) -> StoreResult<()> {
        self.turns.prepare();
        let started = Instant::now();
        let limit = match self.stuck_since {
            Some(_) => AFTER_TIMEOUT.min(self.limits.busy_timeout),
            None => self.limits.busy_timeout,
        };
        let c = self.conn()?;
        c.busy_timeout(Duration::ZERO).map_err(interpret_error)?;
        let out = self.begin_waiting(c, started, limit);
        let restored = crate::connect::busy_handler(c, self.limits.busy_timeout);
        match &out {
            Ok(()) => self.stuck_since = None,
            Err(StoreError::Busy(_)) => _ = self.stuck_since.get_or_insert(started),
            Err(_) => {}
        }
        if let (Ok(()), Err(e)) = (&out, restored) {
            self.rollback_all(); // no transaction may go on without its busy handler
            return Err(interpret_error(e));
        }
        if out.is_ok() {
            self.turns.holding(true);
        }
        out
    }

    /// The tries of [`Self::begin`] until `limit` has passed since `started`, with this
    /// process's wait counted and, once long, marked for the holder.
    fn begin_waiting(&self, c: &Connection, started: Instant, limit: Duration) -> StoreResult<()> {
        let mut backoff = Backoff::new();
        let mut marked = false;
        let out = loop {
            match c
                .prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.execute([]))
            {
                Ok(_) => break Ok(()),
                Err(e) if !is_busy(&e) => break Err(interpret_error(e)),
                Err(_) => {}
            }
            let waited = started.elapsed();
            if waited >= limit {
                let waited = self.stuck_since.map_or(waited, |since| since.elapsed());
                break Err(StoreError::Busy(held_elsewhere(
                    waited,
                    self.turns.holder(),
                )));
            }
            if backoff.tries == 0 {
                self.waits.begin(started);
                crate::connect::count_busy_wait();
            }
            if !marked && waited >= STARVING {
                self.turns.waiting(true);
                marked = true;
            }
            std::thread::sleep(backoff.next(waited).min(limit - waited));
        };
        if marked {
            self.turns.waiting(false);
        }
        if backoff.tries > 0 {
            self.waits.end();
        }
        out
    }

    /// The group's transaction ended (committed or rolled back): other processes' turn.
    fn end_turn(&self) {
        self.turns.holding(false);
    }

    fn savepoint(&mut self, id: u64) -> StoreResult<Member> {
        if let Err(e) = exec(self.conn()?, "SAVEPOINT idem_member") {
            self.after_error();
            return Err(e);
        }
        self.member = Some(id);
        Ok(Member(id))
    }

    /// `Ok` while `m`'s savepoint is open in a live group; the error says what ended it.
    pub(crate) fn check(&mut self, m: Member) -> StoreResult<()> {
        self.after_error();
        if self.member == Some(m.0) {
            return Ok(());
        }
        Err(StoreError::Unavailable(
            "this SQLite transaction was rolled back: an error made SQLite end the \
             transaction it was part of; run it again"
                .into(),
        ))
    }

    /// Runs `f` as part of member `m`; an error that made SQLite end the transaction
    /// fails the whole group.
    pub(crate) fn run<R>(
        &mut self,
        m: Member,
        f: impl FnOnce(&Connection) -> StoreResult<R>,
    ) -> StoreResult<R> {
        self.check(m)?;
        let out = f(self.conn()?);
        match &out {
            Err(_) => self.after_error(),
            // A statement that ended the transaction without an error was a ROLLBACK run
            // inside it (the commit hook turns a COMMIT into an error and a rollback),
            // perhaps followed by a BEGIN.
            Ok(_) if !self.alive() => {
                self.fail_group(lost(
                    "a statement inside a transaction sharing its commit (a ROLLBACK, which \
                     a transaction must not run) ended it",
                ));
                return Err(StoreError::Invalid(
                    "a statement ended the SQLite transaction it ran in; end a transaction \
                     with commit or rollback, never with COMMIT or ROLLBACK statements"
                        .into(),
                ));
            }
            Ok(_) => {}
        }
        out
    }

    /// Runs `op` as one member from entry to release (what a store operation sends), and
    /// hands its result to `deliver` once the group's `COMMIT` returns (at once if it
    /// failed).
    pub(crate) fn member<R: Send + 'static>(
        &mut self,
        op: impl FnOnce(&Connection) -> StoreResult<R>,
        deliver: impl FnOnce(StoreResult<R>) + Send + 'static,
    ) {
        let m = match self.enter() {
            Ok(m) => m,
            Err(e) => return deliver(Err(e)),
        };
        match self.run(m, op) {
            Ok(out) => self.release_then(m, move |r| deliver(r.map(|()| out))),
            Err(e) => {
                self.abandon(m);
                deliver(Err(e));
            }
        }
    }

    /// Releases `m`'s savepoint into the group; the result resolves at the group's commit.
    pub(crate) fn release(&mut self, m: Member) -> Durable {
        let (tx, rx) = oneshot::channel();
        self.release_then(m, move |r| {
            let _ = tx.send(r);
        });
        Durable(rx)
    }

    fn release_then(&mut self, m: Member, then: impl FnOnce(StoreResult<()>) + Send + 'static) {
        if let Err(e) = self.check(m) {
            return then(Err(e));
        }
        let released = self.conn().and_then(|c| exec(c, "RELEASE idem_member"));
        if let Err(e) = released {
            self.after_error();
            self.abandon(m);
            return then(Err(e));
        }
        self.member = None;
        match &mut self.group {
            Some(g) => g.waiters.push(Box::new(then)),
            None => then(Err(lost("the transaction ended before its commit"))),
        }
    }

    /// Rolls `m` back to its savepoint: only its own writes are undone.
    pub(crate) fn abandon(&mut self, m: Member) {
        if self.member != Some(m.0) {
            return;
        }
        self.member = None;
        if self.alive()
            && let Ok(c) = self.conn()
            && let Err(e) =
                exec(c, "ROLLBACK TO idem_member").and_then(|()| exec(c, "RELEASE idem_member"))
        {
            tracing::warn!(error = %e, "rolling back an SQLite savepoint failed");
            self.after_error();
        }
    }

    /// Whether the open group should commit now, given how many other members are
    /// still coming.
    pub(crate) fn due(&self, others: usize) -> bool {
        match &self.group {
            Some(g) if self.member.is_none() => {
                others == 0
                    || g.waiters.len() >= self.limits.max
                    || g.started.elapsed() >= self.limits.window
            }
            _ => false,
        }
    }

    /// When the writer thread should next look at the open group: its window's end, or
    /// while a member's savepoint is open (which the member's own end will look at) a
    /// window from now, so a group whose next member never comes is still committed.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let g = self.group.as_ref()?;
        Some(match self.member {
            None => g.started + self.limits.window,
            Some(_) => Instant::now() + self.limits.window,
        })
    }

    /// Commits the open group and tells its members.
    pub(crate) fn commit(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        let result = match self.conn() {
            Ok(c) if self.alive() => {
                self.committing.store(true, Ordering::SeqCst);
                let committed = exec(c, "COMMIT");
                self.committing.store(false, Ordering::SeqCst);
                committed
            }
            Ok(_) => Err(lost("SQLite had ended the transaction")),
            Err(e) => Err(e),
        };
        if result.is_err() {
            self.rollback_all();
        }
        self.end_turn();
        // A COMMIT that fails (a deferred constraint) may be one member's doing, unknown
        // which: the others must hear a retryable error, not the culprit's `Invalid`.
        let result = match result {
            Err(e) if group.waiters.len() > 1 => Err(lost(&format!(
                "the COMMIT it shared with other transactions failed ({e}), perhaps \
                 for another one's writes"
            ))),
            r => r,
        };
        for w in group.waiters {
            w(result.clone());
        }
    }

    /// Commits what is open and closes the connection (the store is closing).
    pub(crate) fn close(&mut self) {
        if let Some(m) = self.member {
            self.abandon(Member(m));
        }
        self.commit();
        if let Some(conn) = self.conn.take()
            && let Err((_, e)) = conn.close()
        {
            tracing::warn!(error = %e, "closing the SQLite write connection failed");
        }
    }

    /// chaos-break-effect-key: commits the group with `m`'s writes so far, then opens a
    /// new group with `m`'s savepoint again.
    #[cfg(feature = "chaos-break-effect-key")]
    pub(crate) fn restart(&mut self, m: Member) -> StoreResult<Member> {
        self.check(m)?;
        exec(self.conn()?, "RELEASE idem_member")?;
        self.member = None;
        self.commit();
        self.enter()
    }

    /// Whether the group's transaction is still SQLite's open transaction.
    fn alive(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| !c.is_autocommit())
            && self.rollbacks.load(Ordering::SeqCst) == self.begun_after
    }

    /// After an error: if SQLite ended the transaction, every member of the group lost
    /// its writes and hears so.
    fn after_error(&mut self) {
        if self.group.is_some() && !self.alive() {
            self.fail_group(lost(
                "an error in a transaction sharing its commit made SQLite roll back",
            ));
        }
    }

    fn fail_group(&mut self, error: StoreError) {
        self.member = None;
        if let Some(g) = self.group.take() {
            for w in g.waiters {
                w(Err(error.clone()));
            }
        }
        self.rollback_all();
        self.end_turn();
    }

    /// A savepoint left open by a member whose caller vanished without ending it.
    pub(crate) fn drop_orphan(&mut self) {
        if let Some(m) = self.member {
            tracing::warn!("rolling back an SQLite transaction its caller left open");
            self.abandon(Member(m));
        }
    }

    fn rollback_all(&mut self) {
        if let Ok(c) = self.conn()
            && !c.is_autocommit()
            && let Err(e) = exec(c, "ROLLBACK")
        {
            tracing::warn!(error = %e, "SQLite rollback failed");
        }
    }
}

/// Runs one cached statement that returns no rows.
fn exec(c: &Connection, sql: &str) -> StoreResult<()> {
    c.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
        .map_err(interpret_error)
}

fn lost(why: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the SQLite transaction did not commit: {why}; nothing it wrote was kept"
    ))
}
