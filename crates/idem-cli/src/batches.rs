//! `idem batches create|add|seal|list|show|children`: batches of child jobs whose last
//! child to finish enqueues one successor.
//!
//! Children come as JSON, one job per line (`{"kind": …, "args": …, "queue": …,
//! "priority": …, "max_attempts": …, "enqueue_key": …}`; only `kind` is required), from a
//! file or stdin (`-`). What must stay true: every child is read and checked before the
//! database is opened, so a bad line is a usage error (exit 2) that names its line, and
//! nothing is written.

use std::io::BufRead;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use idem::{Batch, BatchList, BatchRow, BatchState, Idem, Job, JobState, StoreError};
use serde::Deserialize;

use crate::database;
use crate::exit::{Exit, OrExit};
use crate::output::{Format, print_json};
use crate::show::time;
use crate::table::{Table, left, right};

/// `idem batches …`.
#[derive(Subcommand)]
pub enum BatchesCommand {
    /// Create a batch: its successor, its children, what runs when children die
    ///
    /// Sealed at once unless --open: a sealed batch takes no more children, and its
    /// successor is enqueued (key `batch:{id}:done`) by the change that finishes its last
    /// child, or now when it has none.
    Create(CreateArgs),
    /// Add children to an open batch
    Add {
        /// Batch id
        id: i64,
        /// The children: a file of JSON lines, one job each, or `-` for stdin
        #[arg(long, value_name = "FILE")]
        children: String,
    },
    /// Seal a batch: no more children; it finishes when every child has
    Seal {
        /// Batch id
        id: i64,
        #[command(flatten)]
        format: Format,
    },
    /// List batches, newest first
    List {
        /// Only this state (open, sealed, finished)
        #[arg(long)]
        state: Option<String>,
        /// Only ids below this one (pagination)
        #[arg(long)]
        before: Option<i64>,
        /// At most this many
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        format: Format,
    },
    /// Show one batch: its counts, its children by state, its successor
    Show {
        /// Batch id
        id: i64,
        #[command(flatten)]
        format: Format,
    },
    /// A page of a batch's children in id order, with their results and errors
    Children {
        /// Batch id
        id: i64,
        /// Only ids above this one (pagination)
        #[arg(long)]
        after: Option<i64>,
        /// At most this many
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        format: Format,
    },
}

/// The flags of `idem batches create`.
#[derive(Args)]
pub struct CreateArgs {
    /// The successor's kind (the job enqueued when every child finished)
    #[arg(long, value_name = "KIND")]
    successor: String,
    /// The successor's arguments, JSON
    #[arg(long, value_name = "JSON", default_value = "{}")]
    successor_args: String,
    /// The successor's queue
    #[arg(long, value_name = "QUEUE", default_value = "default")]
    successor_queue: String,
    /// A job kind that runs instead of the successor when any child is dead (default:
    /// the successor runs and reads the outcomes)
    #[arg(long, value_name = "KIND")]
    on_dead: Option<String>,
    /// The failure successor's arguments, JSON
    #[arg(long, value_name = "JSON", default_value = "{}", requires = "on_dead")]
    on_dead_args: String,
    /// The children: a file of JSON lines, one job each, or `-` for stdin
    #[arg(long, value_name = "FILE")]
    children: Option<String>,
    /// Keep the batch open for `idem batches add`; it cannot finish before `seal`
    #[arg(long)]
    open: bool,
}

/// One child as a line of the children file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChildLine {
    kind: String,
    #[serde(default)]
    args: Option<serde_json::Value>,
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<i32>,
    enqueue_key: Option<String>,
}

impl ChildLine {
    fn into_job(self) -> Result<Job, idem::IdemError> {
        let mut job = Job::new(self.kind, self.args.unwrap_or(serde_json::json!({})));
        if let Some(q) = self.queue {
            job = job.queue(q);
        }
        if let Some(p) = self.priority {
            job = job.priority(p);
        }
        if let Some(n) = self.max_attempts {
            job = job.max_attempts(n);
        }
        if let Some(k) = self.enqueue_key {
            job = job.enqueue_key(k);
        }
        job.validate()?;
        Ok(job)
    }
}

/// `idem batches …`.
pub async fn run(url: &str, cmd: BatchesCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BatchesCommand::Create(a) => {
            let batch = create_batch(a)?;
            let idem = database::open(url).await?;
            print_json(&idem.batch(batch).await?)?;
            // Wakes the workers of other processes before this one exits.
            idem.close().await;
        }
        BatchesCommand::Add { id, children } => {
            let jobs = read_children(&children)?;
            let idem = database::open(url).await?;
            print_json(&idem.batch_add(id, jobs).await?)?;
            idem.close().await;
        }
        BatchesCommand::Seal { id, format } => {
            let row = database::open(url).await?.batch_seal(id).await?;
            match format.json {
                true => print_json(&row)?,
                false => crate::verbosity::say(format!("batch {} is {}", row.id, describe(&row))),
            }
        }
        BatchesCommand::List {
            state,
            before,
            limit,
            format,
        } => {
            let state = state
                .map(|s| s.parse::<BatchState>())
                .transpose()
                .or_exit(Exit::Usage)?;
            let filter = BatchList {
                state,
                principal: None,
                before_id: before,
                limit,
            };
            let rows = database::open(url).await?.batches(filter).await?;
            match format.json {
                true => print_json(&rows)?,
                false => batch_table(&rows).print(),
            }
        }
        BatchesCommand::Show { id, format } => {
            show(&database::open(url).await?, id, format).await?
        }
        BatchesCommand::Children {
            id,
            after,
            limit,
            format,
        } => {
            let idem = database::open(url).await?;
            if idem.batch_get(id).await?.is_none() {
                return Err(StoreError::not_found(format!("batch {id}")).into());
            }
            let rows = idem.batch_children(id, after, limit).await?;
            match format.json {
                true => print_json(&rows)?,
                false => crate::jobs::job_table(&rows).print(),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The batch the flags describe, every child read and checked.
fn create_batch(a: CreateArgs) -> anyhow::Result<Batch> {
    let args = crate::enqueue::parse_json("--successor-args", &a.successor_args)?;
    let successor = Job::new(a.successor, args).queue(a.successor_queue);
    successor.validate().or_exit(Exit::Usage)?;
    let mut batch = Batch::new(successor);
    if let Some(kind) = a.on_dead {
        let args = crate::enqueue::parse_json("--on-dead-args", &a.on_dead_args)?;
        let failure = Job::new(kind, args);
        failure.validate().or_exit(Exit::Usage)?;
        batch = batch.on_dead(failure);
    }
    if let Some(path) = a.children {
        batch = batch.children(read_children(&path)?);
    }
    if a.open {
        batch = batch.open();
    }
    Ok(batch)
}

/// The children in `path` (`-` = stdin), one JSON job per non-empty line.
fn read_children(path: &str) -> anyhow::Result<Vec<Job>> {
    let reader: Box<dyn BufRead> = match path {
        "-" => Box::new(std::io::stdin().lock()),
        _ => Box::new(std::io::BufReader::new(
            std::fs::File::open(path)
                .map_err(|e| anyhow::anyhow!("--children {path:?} cannot be read: {e}"))
                .or_exit(Exit::Usage)?,
        )),
    };
    let mut jobs = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| anyhow::anyhow!("--children {path:?}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let job = serde_json::from_str::<ChildLine>(&line)
            .map_err(anyhow::Error::from)
            .and_then(|c| c.into_job().map_err(anyhow::Error::from))
            .map_err(|e| {
                anyhow::anyhow!(
                    "--children {path:?} line {}: {e} (one job per line: \
                     {{\"kind\": …, \"args\": …, \"queue\": …, \"enqueue_key\": …}})",
                    n + 1
                )
            })
            .or_exit(Exit::Usage)?;
        jobs.push(job);
    }
    Ok(jobs)
}

/// Prints one batch in full (or as JSON), with the first page of its children.
async fn show(idem: &Idem, id: i64, format: Format) -> anyhow::Result<()> {
    let Some(status) = idem.batch_status(id).await? else {
        return Err(StoreError::not_found(format!("batch {id}")).into());
    };
    if format.json {
        return print_json(&status);
    }
    let b = &status.batch;
    println!("batch {}", b.id);
    let successor = b.successor_job_id.map_or_else(
        || format!("{} (not yet enqueued)", b.successor.kind),
        |j| format!("job {j}"),
    );
    let fields = [
        ("state", describe(b)),
        ("total", b.total.to_string()),
        ("completed", b.completed.to_string()),
        ("dead", b.dead.to_string()),
        ("cancelled", b.cancelled.to_string()),
        ("running", status.count(JobState::Running).to_string()),
        ("unfinished", b.unfinished_children().to_string()),
        ("on dead", b.on_dead.as_str().to_owned()),
        ("successor", successor),
        ("created at", time(Some(b.created_at))),
        ("sealed at", time(b.sealed_at)),
        ("finished at", time(b.finished_at)),
    ];
    for (name, value) in fields {
        println!("  {name:<14}{value}");
    }
    let states: Vec<String> = status
        .states
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    println!("  {:<14}{}", "children", states.join(", "));
    Ok(())
}

/// A batch's state with what it waits for.
fn describe(b: &BatchRow) -> String {
    match b.state {
        BatchState::Open => "open (taking children; finishes only once sealed)".to_owned(),
        BatchState::Sealed => format!("sealed ({} children unfinished)", b.unfinished_children()),
        BatchState::Finished => "finished".to_owned(),
    }
}

/// One line per batch.
fn batch_table(rows: &[BatchRow]) -> Table {
    let mut table = Table::new(&[
        right("id"),
        left("state", 8),
        right("total"),
        right("completed"),
        right("dead"),
        right("cancelled"),
        right("unfinished"),
        left("successor", 40),
        left("created at", 30),
    ]);
    for b in rows {
        table.row(vec![
            b.id.to_string(),
            b.state.as_str().to_owned(),
            b.total.to_string(),
            b.completed.to_string(),
            b.dead.to_string(),
            b.cancelled.to_string(),
            b.unfinished_children().to_string(),
            b.successor_job_id
                .map_or_else(|| b.successor.kind.clone(), |j| format!("job {j}")),
            time(Some(b.created_at)),
        ]);
    }
    table
}
