//! `idem reconcile`: one reconciliation pass for the job kinds this binary runs (the
//! built-in ones), then its report; also the report's text, which `idem worker` prints
//! after each pass of its own that changed something.
//!
//! What must stay true: the pass is the library's ([`Worker::reconciler`]), on a worker
//! that is built but never started, so it claims no job; an intent of a kind this binary
//! does not run is left alone (`skipped`) for the processes that register that kind.
//! The command exits 1 when the pass found a duplicate or parked an intent as manual, so
//! a cron job can alarm on it.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idem::intent::{ReconcileOptions, ReconcileReport};
use idem::{Idem, Worker, WorkerConfig};

use crate::database;
use crate::exit::{Exit, fail};
use crate::output::{Format, print_json};

/// Arguments of `idem reconcile`.
#[derive(Args)]
#[command(after_help = "\
Exit status: 0 when the pass found no duplicate and parked nothing as manual; 1 when it
found a remote effect applied more than once (duplicates, audit_duplicates) or could not
tell and parked an intent as manual (see `idem intents list`), so a cron job can alarm on
it; the other codes as for every command (`idem --help`).")]
pub struct ReconcileArgs {
    /// How long after an intent last changed before a remote's "absent" is trusted (a
    /// call still in flight must have landed), and before a completed unkeyed call is
    /// audited
    #[arg(long, default_value = "1m", value_parser = duration, value_name = "DUR")]
    settle: Duration,
    /// How far back the audit looks again at completed unkeyed calls (by creation)
    #[arg(long, default_value = "3d", value_parser = duration, value_name = "DUR")]
    audit_window: Duration,
    /// Intents read per page (a pass reads every page)
    #[arg(long, default_value_t = ReconcileOptions::default().limit,
          value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    #[command(flatten)]
    format: Format,
}

/// A duration flag: `30s`, `10m`, `1h 30m`, `3d`, or `0`.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); write e.g. 0, 30s, 10m, 3d"))
}

/// `idem reconcile`.
pub async fn run(url: &str, a: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let opts = ReconcileOptions {
        settle: a.settle,
        audit_window: a.audit_window,
        limit: a.limit,
    };
    let worker = builtin_worker(&database::open(url).await?)?;
    let spinner = crate::progress::spinner("looking unknown calls up on their remotes");
    let report = worker.reconciler().run(opts).await;
    spinner.finish_and_clear();
    let report = report?;
    match a.format.json {
        true => {
            print_json(&report)?;
            if report.skipped > 0 {
                crate::verbosity::note(skipped_note(&report));
            }
        }
        false => print!("{}", render(&worker, &opts, &report)),
    }
    check(&report)?;
    Ok(ExitCode::SUCCESS)
}

/// A worker with the built-in kinds, never started: its reconciler.
fn builtin_worker(idem: &Idem) -> anyhow::Result<Worker> {
    let mut worker = idem.worker(WorkerConfig::default())?;
    crate::worker::register_builtins(&mut worker)?;
    Ok(worker)
}

/// Exit 1 when the pass found what an operator must look at.
fn check(r: &ReconcileReport) -> anyhow::Result<()> {
    let duplicates = r.duplicates + r.audit_duplicates;
    if duplicates + r.manual == 0 {
        return Ok(());
    }
    Err(fail(
        Exit::Refused,
        format!(
            "this pass found {duplicates} duplicate remote effect(s) and parked {} intent(s) \
             as manual: see `idem intents list`, and settle manual ones with `idem intents \
             resolve`",
            r.manual
        ),
    ))
}

/// Every counter with what it means, in the report's order.
fn counters(r: &ReconcileReport) -> [(&'static str, u64, &'static str); 11] {
    [
        (
            "looked_up",
            r.looked_up,
            "unknown intents looked up on their remote",
        ),
        ("applied", r.applied, "applied once: completed"),
        (
            "absent",
            r.absent,
            "absent after the settle delay: released, sent again",
        ),
        (
            "settling",
            r.settling,
            "absent within the settle delay: left for a later pass",
        ),
        (
            "duplicates",
            r.duplicates,
            "applied more than once: marked duplicate",
        ),
        (
            "manual",
            r.manual,
            "the remote could not tell: parked for an operator",
        ),
        (
            "skipped",
            r.skipped,
            "of kinds this binary does not run: left alone",
        ),
        ("raced", r.raced, "settled by someone else meanwhile"),
        (
            "audited",
            r.audited,
            "completed unkeyed calls looked up again",
        ),
        (
            "audit_duplicates",
            r.audit_duplicates,
            "of those, applied more than once",
        ),
        (
            "jobs_retried",
            r.jobs_retried,
            "dead jobs put back to run once settled",
        ),
    ]
}

/// The text `idem reconcile` prints: what ran, every counter on a line, the note on
/// skipped intents.
fn render(worker: &Worker, opts: &ReconcileOptions, r: &ReconcileReport) -> String {
    let kinds: Vec<String> = worker.kinds().into_iter().map(|(k, _)| k).collect();
    let human = idem::config::human;
    let mut out = format!(
        "reconcile: kinds {} (settle {}, audit window {}, limit {})\n",
        kinds.join(", "),
        human(opts.settle),
        human(opts.audit_window),
        opts.limit
    );
    for (name, value, meaning) in counters(r) {
        out += &format!("  {name:<17}{value:>6}  {meaning}\n");
    }
    out += &format!("{}\n", skipped_note(r));
    out
}

fn skipped_note(r: &ReconcileReport) -> String {
    format!(
        "{} skipped: intents of job kinds this binary does not run are reconciled by the \
         processes that register those kinds (Worker::reconciler)",
        r.skipped
    )
}

/// The counters of a pass that are not zero, on one line (`idem worker`'s log).
pub fn summary(r: &ReconcileReport) -> String {
    let parts: Vec<String> = counters(r)
        .into_iter()
        .filter(|(_, value, _)| *value > 0)
        .map(|(name, value, _)| format!("{name} {value}"))
        .collect();
    parts.join(", ")
}

/// Whether a pass changed anything (settled an intent, marked a duplicate, retried a
/// job), as opposed to finding nothing to do or only intents still settling.
pub fn changed_anything(r: &ReconcileReport) -> bool {
    r.applied + r.absent + r.duplicates + r.manual + r.audit_duplicates + r.jobs_retried > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_default_to_the_librarys_options() {
        use clap::{Args, FromArgMatches};
        let cmd = ReconcileArgs::augment_args(clap::Command::new("reconcile"));
        let a = ReconcileArgs::from_arg_matches(&cmd.get_matches_from(["reconcile"])).unwrap();
        let given = ReconcileOptions {
            settle: a.settle,
            audit_window: a.audit_window,
            limit: a.limit,
        };
        assert_eq!(given, ReconcileOptions::default());
    }

    #[test]
    fn durations_parse_with_zero() {
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert_eq!(duration("1m"), Ok(Duration::from_secs(60)));
        assert!(duration("soon").unwrap_err().contains("\"soon\""));
    }

    #[test]
    fn duplicates_and_manual_fail_the_check() {
        let clean = ReconcileReport {
            looked_up: 3,
            absent: 2,
            settling: 1,
            ..ReconcileReport::default()
        };
        check(&clean).unwrap();
        assert_eq!(summary(&clean), "looked_up 3, absent 2, settling 1");
        for r in [
            ReconcileReport {
                manual: 1,
                ..clean.clone()
            },
            ReconcileReport {
                audit_duplicates: 1,
                ..clean.clone()
            },
        ] {
            assert_eq!(Exit::of(&check(&r).unwrap_err()), Exit::Refused);
        }
    }
}
