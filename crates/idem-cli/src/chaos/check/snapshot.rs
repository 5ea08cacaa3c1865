//! The database as the checker sees it: every table it counts, read whole with plain
//! `SELECT`s over a connection of its own (rusqlite for SQLite, sqlx for PostgreSQL),
//! never through idem's store or engine, so a fault in their code cannot hide itself.

use std::collections::HashMap;

use anyhow::{Context, bail};
use sqlx::{Column, Connection, Row, TypeInfo};

/// One value as read.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Int(i64),
    Text(String),
    Null,
}

impl Cell {
    fn int(&self) -> i64 {
        match self {
            Cell::Int(n) => *n,
            _ => 0,
        }
    }
    fn opt(&self) -> Option<i64> {
        match self {
            Cell::Int(n) => Some(*n),
            _ => None,
        }
    }
    fn text(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Int(n) => n.to_string(),
            Cell::Null => String::new(),
        }
    }
}

/// A job's row, as far as the checker needs it.
#[derive(Debug, Clone)]
pub(super) struct JobSeen {
    pub(super) state: String,
    pub(super) fence: i64,
    pub(super) follows_job: Option<i64>,
    pub(super) follows_batch: Option<i64>,
}

impl JobSeen {
    pub(super) fn finished(&self) -> bool {
        matches!(self.state.as_str(), "completed" | "dead" | "cancelled")
    }
}

/// An intent's row.
#[derive(Debug, Clone)]
pub(super) struct IntentSeen {
    pub(super) state: String,
    pub(super) attempt: i64,
    pub(super) job: i64,
    /// In progress with its lease run out.
    pub(super) expired: bool,
}

/// An effect row of the workload: the claim that wrote it, and what it names.
#[derive(Debug, Clone)]
pub(super) struct Effect {
    /// What the row is about: the order, the job, (chain, step), (batch, shop), the batch.
    pub(super) about: (i64, i64),
    /// The receipt number, the tally's amount, the batch's total; 0 for the others.
    pub(super) value: i64,
    pub(super) job: i64,
    pub(super) fence: i64,
}

/// Every table the checker counts.
#[derive(Default)]
pub(super) struct Snapshot {
    pub(super) jobs: HashMap<i64, JobSeen>,
    /// `(job, outcome)` of every finished attempt.
    pub(super) attempts: Vec<(i64, String)>,
    pub(super) outbox: Vec<Effect>,
    /// Moves of orders, with the guard's answer.
    pub(super) moves: Vec<(Effect, String)>,
    pub(super) orders: HashMap<i64, String>,
    pub(super) notes: Vec<Effect>,
    pub(super) links: Vec<Effect>,
    pub(super) tallies: Vec<Effect>,
    pub(super) totals: Vec<Effect>,
    /// `(entry key, account, amount)`.
    pub(super) entries: Vec<(String, String, i64)>,
    pub(super) balances: HashMap<String, i64>,
    pub(super) intents: Vec<IntentSeen>,
    pub(super) batches: Vec<i64>,
}

/// The statements, each answering the columns its reader expects.
const JOBS: &str = "SELECT id, state, fence, follows_job_id, follows_batch_id FROM idem_job";
const ATTEMPTS: &str = "SELECT job_id, outcome FROM idem_job_attempt";
const OUTBOX: &str = "SELECT order_id, 0, receipt_no, job_id, fence FROM chaos_outbox";
const MOVES: &str = "SELECT order_id, 0, 0, job_id, fence, outcome FROM chaos_order_move";
const ORDERS: &str = "SELECT order_id, status FROM chaos_order";
const NOTES: &str = "SELECT job_id, 0, 0, job_id, fence FROM chaos_note";
const LINKS: &str = "SELECT chain, step, 0, job_id, fence FROM chaos_link";
const TALLIES: &str = "SELECT batch_id, shop, amount, job_id, fence FROM chaos_tally";
const TOTALS: &str = "SELECT batch_id, 0, total, job_id, fence FROM chaos_batch_total";
const ENTRIES: &str = "SELECT entry_key, account, amount FROM idem_ledger_entry";
const BALANCES: &str = "SELECT account, balance FROM idem_ledger_balance";
const BATCHES: &str = "SELECT id FROM idem_batch";
const INTENTS_PG: &str = "SELECT key, state, attempt, job_id, \
     CASE WHEN lease_expires_at < now() THEN 1 ELSE 0 END FROM idem_intent";
const INTENTS_SQLITE: &str = "SELECT key, state, attempt, job_id, \
     CASE WHEN lease_expires_at < CAST(unixepoch('subsec') * 1000 AS INTEGER) THEN 1 ELSE 0 END \
     FROM idem_intent";

/// A connection of the checker's own.
enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(sqlx::PgConnection),
}

impl Conn {
    async fn open(url: &str) -> anyhow::Result<Conn> {
        if let Some(path) = crate::scratch::sqlite_path(url) {
            let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
            let conn = rusqlite::Connection::open_with_flags(path, flags)
                .with_context(|| format!("the checker cannot open {}", path.display()))?;
            return Ok(Conn::Sqlite(conn));
        }
        let conn = sqlx::PgConnection::connect(url)
            .await
            .context("the checker cannot connect to PostgreSQL")?;
        Ok(Conn::Postgres(conn))
    }

    async fn rows(&mut self, sql: &'static str) -> anyhow::Result<Vec<Vec<Cell>>> {
        let read = match self {
            Conn::Sqlite(conn) => sqlite_rows(conn, sql),
            Conn::Postgres(conn) => pg_rows(conn, sql).await,
        };
        read.with_context(|| format!("the checker's query failed: {sql}"))
    }
}

fn sqlite_rows(conn: &rusqlite::Connection, sql: &str) -> anyhow::Result<Vec<Vec<Cell>>> {
    use rusqlite::types::ValueRef;
    let mut stmt = conn.prepare(sql)?;
    let n = stmt.column_count();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut cells = Vec::with_capacity(n);
        for i in 0..n {
            cells.push(match row.get_ref(i)? {
                ValueRef::Integer(v) => Cell::Int(v),
                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Null => Cell::Null,
                other => bail!("unexpected value {other:?}"),
            });
        }
        out.push(cells);
    }
    Ok(out)
}

async fn pg_rows(
    conn: &mut sqlx::PgConnection,
    sql: &'static str,
) -> anyhow::Result<Vec<Vec<Cell>>> {
    let rows = sqlx::query(sql).fetch_all(conn).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut cells = Vec::with_capacity(row.len());
        for (i, col) in row.columns().iter().enumerate() {
            let cell = match col.type_info().name() {
                "INT8" => row.try_get::<Option<i64>, _>(i)?.map(Cell::Int),
                "INT4" => row
                    .try_get::<Option<i32>, _>(i)?
                    .map(|v| Cell::Int(v.into())),
                "INT2" => row
                    .try_get::<Option<i16>, _>(i)?
                    .map(|v| Cell::Int(v.into())),
                "BOOL" => row
                    .try_get::<Option<bool>, _>(i)?
                    .map(|v| Cell::Int(v.into())),
                "TEXT" | "VARCHAR" => row.try_get::<Option<String>, _>(i)?.map(Cell::Text),
                other => bail!("unexpected column type {other}"),
            };
            cells.push(cell.unwrap_or(Cell::Null));
        }
        out.push(cells);
    }
    Ok(out)
}

fn effect(r: &[Cell]) -> Effect {
    Effect {
        about: (r[0].int(), r[1].int()),
        value: r[2].int(),
        job: r[3].int(),
        fence: r[4].int(),
    }
}

/// Reads every table the checker counts from the database at `url`.
pub(super) async fn read(url: &str) -> anyhow::Result<Snapshot> {
    let mut conn = Conn::open(url).await?;
    let mut s = Snapshot::default();
    for r in conn.rows(JOBS).await? {
        let job = JobSeen {
            state: r[1].text(),
            fence: r[2].int(),
            follows_job: r[3].opt(),
            follows_batch: r[4].opt(),
        };
        s.jobs.insert(r[0].int(), job);
    }
    s.attempts = (conn.rows(ATTEMPTS).await?)
        .into_iter()
        .map(|r| (r[0].int(), r[1].text()))
        .collect();
    let mut effects = async |sql: &'static str| -> anyhow::Result<Vec<Effect>> {
        Ok(conn.rows(sql).await?.iter().map(|r| effect(r)).collect())
    };
    s.outbox = effects(OUTBOX).await?;
    s.notes = effects(NOTES).await?;
    s.links = effects(LINKS).await?;
    s.tallies = effects(TALLIES).await?;
    s.totals = effects(TOTALS).await?;
    s.moves = (conn.rows(MOVES).await?)
        .iter()
        .map(|r| (effect(r), r[5].text()))
        .collect();
    s.orders = (conn.rows(ORDERS).await?)
        .iter()
        .map(|r| (r[0].int(), r[1].text()))
        .collect();
    s.entries = (conn.rows(ENTRIES).await?)
        .iter()
        .map(|r| (r[0].text(), r[1].text(), r[2].int()))
        .collect();
    s.balances = (conn.rows(BALANCES).await?)
        .iter()
        .map(|r| (r[0].text(), r[1].int()))
        .collect();
    s.batches = (conn.rows(BATCHES).await?)
        .iter()
        .map(|r| r[0].int())
        .collect();
    let intents = match conn {
        Conn::Sqlite(_) => INTENTS_SQLITE,
        Conn::Postgres(_) => INTENTS_PG,
    };
    s.intents = (conn.rows(intents).await?)
        .iter()
        .map(|r| IntentSeen {
            state: r[1].text(),
            attempt: r[2].int(),
            job: r[3].int(),
            expired: r[0] != Cell::Null && r[4].int() == 1,
        })
        .collect();
    if let Conn::Postgres(pg) = conn {
        let _ = pg.close().await;
    }
    Ok(s)
}
