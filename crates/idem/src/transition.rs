//! Guarded state transitions on a caller's own table.
//!
//! `UPDATE orders SET status = 'paid' WHERE id = 42 AND status = 'pending'` is the
//! effect-once way to move a row from one state to another: the `WHERE` names the state
//! the change starts from, so a second execution changes nothing. [`Guard::apply`] runs
//! that update in an idem transaction and says which of three things happened: the row
//! moved, it was already in the target state (a repeat: nothing to do), or it is in some
//! other state (a conflict the caller must handle). The read that tells the last two apart
//! runs only after the guarded update changed nothing.
//!
//! ```
//! use idem::Guard;
//!
//! let orders = Guard::new("orders", "id", "status").unwrap();
//! assert!(Guard::new("orders; DROP TABLE x", "id", "status").is_err());
//! # let _ = orders;
//! ```

use idem_store::{SqlValue, StoreTx};

use crate::error::IdemError;

/// What a guarded transition did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The row moved from the expected state to the target state.
    Changed,
    /// The row was already in the target state; nothing changed.
    AlreadyThere,
    /// The row is in another state (`Some`) or does not exist (`None`); nothing changed.
    Conflict {
        /// The row's current state, if the row exists.
        current: Option<String>,
    },
}

/// A table, its key column and its state column, checked once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    update: String,
    read: String,
}

impl Guard {
    /// Names the table (optionally `schema.table`), its key column and its state column.
    /// Each must be a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 characters);
    /// anything else is refused, so no caller input can reach the SQL text.
    pub fn new(table: &str, key: &str, state: &str) -> Result<Guard, IdemError> {
        for part in table.splitn(2, '.') {
            check_ident("table", part)?;
        }
        check_ident("key column", key)?;
        check_ident("state column", state)?;
        Ok(Guard {
            update: format!("UPDATE {table} SET {state} = $1 WHERE {key} = $2 AND {state} = $3"),
            read: format!("SELECT {state} FROM {table} WHERE {key} = $1"),
        })
    }

    /// Moves the row `id` from state `from` to state `to` in the transaction `tx`.
    ///
    /// In a handler, `tx` is the job's fenced transaction ([`EffectTx::store_tx`]), so the
    /// move commits with the job's completion. Order 42 paid twice moves once; order 43,
    /// cancelled meanwhile, is a conflict:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use idem::{
    ///     EffectClass, Guard, Handler, Idem, Job, JobContext, JobError, Transition, WorkerConfig,
    /// };
    /// use tokio::sync::mpsc;
    ///
    /// struct MarkPaid {
    ///     orders: Guard,
    ///     done: mpsc::UnboundedSender<Transition>, // tells the example a job finished
    /// }
    ///
    /// impl Handler for MarkPaid {
    ///     const KIND: &'static str = "mark-paid";
    ///     const EFFECT: EffectClass = EffectClass::Transactional;
    ///     type Args = i64; // the order id
    ///
    ///     async fn run(&self, cx: &mut JobContext, order_id: i64) -> Result<(), JobError> {
    ///         let mut tx = cx.begin().await?;
    ///         let moved = self.orders.apply(tx.store_tx(), order_id, "pending", "paid").await?;
    ///         tx.complete().await?; // the move and the completion commit together
    ///         let _ = self.done.send(moved);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let idem = Idem::connect(&format!("sqlite://{}/idem.db", dir.path().display())).await?;
    /// # let mut setup = idem.begin().await?;
    /// # let table = "CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)";
    /// # setup.execute(table, &[]).await?;
    /// # let rows = "INSERT INTO orders (id, status) VALUES (42, 'pending'), (43, 'cancelled')";
    /// # setup.execute(rows, &[]).await?;
    /// # setup.commit().await?;
    /// for order_id in [42, 42, 43] {
    ///     idem.enqueue(Job::new("mark-paid", serde_json::json!(order_id))).await?;
    /// }
    /// let (done, mut finished) = mpsc::unbounded_channel();
    /// let orders = Guard::new("orders", "id", "status")?;
    /// let mut worker = idem.worker(WorkerConfig::default().only_queue("default", 1))?;
    /// worker.register(MarkPaid { orders, done })?;
    /// let running = worker.start();
    /// let mut answers = Vec::new();
    /// for _ in 0..3 {
    ///     answers.push(tokio::time::timeout(Duration::from_secs(30), finished.recv()).await?);
    /// }
    /// running.shutdown().await;
    ///
    /// let cancelled = Transition::Conflict { current: Some("cancelled".into()) };
    /// assert_eq!(
    ///     answers,
    ///     [Some(Transition::Changed), Some(Transition::AlreadyThere), Some(cancelled)]
    /// );
    /// let rows = idem.store().query("SELECT status FROM orders ORDER BY id", &[]).await?;
    /// let states: Vec<_> = rows.iter().map(|row| row[0].as_str().unwrap()).collect();
    /// assert_eq!(states, ["paid", "cancelled"]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`EffectTx::store_tx`]: crate::EffectTx::store_tx
    pub async fn apply(
        &self,
        tx: &mut dyn StoreTx,
        id: impl Into<SqlValue>,
        from: &str,
        to: &str,
    ) -> Result<Transition, IdemError> {
        let id = id.into();
        let args = [to.into(), id.clone(), from.into()];
        if tx.execute(&self.update, &args).await? > 0 {
            return Ok(Transition::Changed);
        }
        let rows = tx.query(&self.read, &[id]).await?;
        let current = match rows.first().and_then(|r| r.first()) {
            Some(SqlValue::Text(s)) => Some(s.clone()),
            Some(SqlValue::Null) | None => None,
            Some(other) => Some(format!("{other:?}")),
        };
        Ok(match current {
            Some(s) if s == to => Transition::AlreadyThere,
            current => Transition::Conflict { current },
        })
    }
}

fn check_ident(what: &str, name: &str) -> Result<(), IdemError> {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok && rest_ok && name.len() <= 63 {
        return Ok(());
    }
    Err(IdemError::Config(format!(
        "{what} {name:?} is not a plain identifier: use letters, digits and '_' (not first), \
         at most 63 characters"
    )))
}
