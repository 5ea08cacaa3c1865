//! One job in full, for people: every field on a line of its own, its args, and its last
//! error and each attempt's error with every line kept (indented), so nothing a table
//! cut short is lost. `--json` prints the same records as JSON instead.

use idem::{AttemptRow, JobRow, Timestamp};

use crate::table::cell;

/// Prints `job` and its attempts, oldest first.
pub fn print_job(job: &JobRow, attempts: &[AttemptRow]) {
    print!("{}", render_job(job, attempts));
}

fn render_job(job: &JobRow, attempts: &[AttemptRow]) -> String {
    let mut out = format!("job {}\n", job.id);
    for (name, value) in fields(job) {
        out += &format!("  {name:<14}{value}\n");
    }
    out += &block("last error", job.last_error.as_deref());
    let result = job.result.as_ref().map(|r| r.to_string());
    out += &block("result", result.as_deref());
    out += &format!("attempts ({})\n", attempts.len());
    for a in attempts {
        out += &format!(
            "  attempt {} (fence {}): {}, started {}, finished {}\n",
            a.attempt,
            a.fence,
            a.outcome.as_str(),
            time(a.started_at),
            time(Some(a.finished_at)),
        );
        out += &indented(a.error.as_deref().unwrap_or(""), "    ");
    }
    out
}

/// The one-line fields of a job, names and values.
fn fields(job: &JobRow) -> Vec<(&'static str, String)> {
    let one_line = |text: &str| cell(text, usize::MAX);
    let lease = match (&job.lease_owner, job.lease_expires_at) {
        (Some(owner), at) => format!("{} until {}", one_line(owner), time(at)),
        (None, _) => "-".to_owned(),
    };
    vec![
        ("state", job.state.as_str().to_owned()),
        ("kind", one_line(&job.kind)),
        ("queue", one_line(&job.queue)),
        ("priority", job.priority.to_string()),
        ("attempt", format!("{}/{}", job.attempt, job.max_attempts)),
        ("fence", job.fence.to_string()),
        ("lease", lease),
        ("run at", time(Some(job.run_at))),
        ("created at", time(Some(job.created_at))),
        ("attempted at", time(job.attempted_at)),
        ("finalized at", time(job.finalized_at)),
        ("batch", id_or_dash(job.batch_id)),
        ("follows job", id_or_dash(job.follows_job)),
        ("follows batch", id_or_dash(job.follows_batch)),
        ("args", job.args.to_string()),
    ]
}

fn id_or_dash(id: Option<i64>) -> String {
    id.map_or("-".to_owned(), |b| b.to_string())
}

/// A heading and `text` below it, every line indented; `-` when there is none.
fn block(heading: &str, text: Option<&str>) -> String {
    match text {
        None | Some("") => format!("  {heading:<14}-\n"),
        Some(text) => format!("  {heading}\n{}", indented(text, "    ")),
    }
}

fn indented(text: &str, indent: &str) -> String {
    text.lines().map(|l| format!("{indent}{l}\n")).collect()
}

/// A time as `2026-12-01 10:00:00.123 UTC`, or `-`.
pub fn time(at: Option<Timestamp>) -> String {
    at.map_or("-".to_owned(), |t| {
        t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
    })
}
