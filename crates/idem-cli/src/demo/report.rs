//! Printing the demo's report: what the chaos did, every count the checks found, and the
//! verdict.

use std::time::Duration;

use idem::intent::ReconcileReport;

use super::DemoArgs;
use super::chaos::Chaos;
use super::remote::RemoteVerdict;
use super::verify::{Batches, Receipts, Verdict};

/// What the checks found: in the database, at the remotes, and by reconciliation.
pub(super) struct Found<'a> {
    pub(super) verdict: &'a Verdict,
    pub(super) calls: &'a RemoteVerdict,
    pub(super) settled: &'a ReconcileReport,
}

/// Prints the report of a finished run.
pub(super) fn print(
    args: &DemoArgs,
    chaos: &Chaos,
    reports: &[(String, idem::WorkerReport)],
    found: &Found<'_>,
    elapsed: Duration,
) {
    let v = found.verdict;
    let refused: u64 = reports.iter().map(|(_, r)| r.lease_lost).sum();
    println!();
    if args.no_chaos {
        println!("chaos: off");
    }
    for e in &chaos.events {
        println!("chaos: {e}");
    }
    let line = |label: &str, value: String| println!("  {label:<38} {value:>8}");
    println!("report ({:.1} s):", elapsed.as_secs_f64());
    line("jobs enqueued", v.enqueued.to_string());
    line("jobs completed", v.completed.to_string());
    line("jobs dead-lettered", v.dead.to_string());
    line("jobs lost", v.lost.to_string());
    line("receipt mails: orders", v.orders.to_string());
    line(
        "repeated mail requests made no effect",
        v.deduplicated.to_string(),
    );
    line("ledger transfers (distinct)", v.transfers.to_string());
    line(
        "ledger entries beyond two per transfer",
        v.ledger_entries_extra.to_string(),
    );
    line(
        "ledger totals unequal to their entries",
        v.ledger_mismatches.to_string(),
    );
    line(
        "sum of all ledger totals (must be 0)",
        v.ledger_sum.to_string(),
    );
    line(
        "duplicate effects (outbox)",
        v.duplicate_effects.to_string(),
    );
    line("missing effects (outbox)", v.missing_effects.to_string());
    line("effects from a stale claim", v.stale_effects.to_string());
    print_receipts(&v.receipts, &line);
    print_batches(&v.batches, &line);
    print_calls(found.calls, found.settled, &line);
    line("leases expired and rescued", v.rescued.to_string());
    line("stale commits refused by the fence", refused.to_string());
    println!("  (the killed worker's own counts died with it; the rescues above include its jobs)");
    println!(
        "verdict: {}",
        if v.ok() && found.calls.ok() {
            "OK: every job completed, every order got one mail, one receipt number and one \
             move, every transfer moved money once, every batch had one successor whose \
             total is right, every keyed call was applied once, and every unkeyed call \
             applied twice is marked duplicate"
        } else {
            "FAILED"
        }
    );
}

fn print_receipts(r: &Receipts, line: &impl Fn(&str, String)) {
    let numbers = format!("{}/{}", r.numbers, r.mails);
    line("receipt numbers assigned / receipts", numbers);
    line("receipt numbers skipped (gaps)", r.gaps.to_string());
    line("receipt numbers used twice", r.used_twice.to_string());
    line("orders moved paid → receipted", r.moved.to_string());
    line("orders moved more than once", r.moved_twice.to_string());
    line(
        "repeats that found the order receipted",
        r.already_there.to_string(),
    );
    line(
        "orders in conflict (neither state)",
        r.conflicts.to_string(),
    );
    line(
        "orders left behind (not receipted)",
        r.left_behind.to_string(),
    );
}

fn print_batches(b: &Batches, line: &impl Fn(&str, String)) {
    line("batches of shop tallies", b.batches.to_string());
    line("batches not finished", b.unfinished.to_string());
    line(
        "batches without exactly one successor",
        b.successors_not_one.to_string(),
    );
    line("batch totals wrong or missing", b.totals_wrong.to_string());
    line("shop tallies recorded twice", b.tallies_twice.to_string());
}

fn print_calls(c: &RemoteVerdict, r: &ReconcileReport, line: &impl Fn(&str, String)) {
    line("keyed remote calls", c.keyed_calls.to_string());
    line(
        "keyed calls applied more than once",
        c.keyed_applied_twice.to_string(),
    );
    line(
        "keyed calls completed, never applied",
        c.keyed_missing.to_string(),
    );
    line("unkeyed remote calls", c.unkeyed_calls.to_string());
    line(
        "unkeyed calls completed, never applied",
        c.unkeyed_missing.to_string(),
    );
    line(
        "intents taken over after a lost holder",
        c.takeovers.to_string(),
    );
    let reconciled = r.applied + r.absent + r.duplicates;
    line("unknown outcomes reconciled", reconciled.to_string());
    line(
        "  found applied / absent (sent again)",
        format!("{}/{}", r.applied, r.absent),
    );
    line(
        "unknown outcomes parked for an operator",
        c.manual.to_string(),
    );
    line("intents still unknown", c.unknown_left.to_string());
    line(
        "extra copies at the unkeyed remote",
        c.extra_copies.to_string(),
    );
    line(
        "  keys marked duplicate (visible)",
        c.duplicates_visible.to_string(),
    );
    line(
        "  keys duplicated silently",
        c.duplicates_silent.to_string(),
    );
}
