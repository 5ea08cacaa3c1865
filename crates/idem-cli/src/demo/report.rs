//! Printing the demo's report: what the chaos did, every count the checks found, and the
//! verdict.

use std::time::Duration;

use super::DemoArgs;
use super::chaos::Chaos;
use super::verify::{Receipts, Verdict};

/// Prints the report of a finished run.
pub(super) fn print(
    args: &DemoArgs,
    chaos: &Chaos,
    reports: &[(String, idem::WorkerReport)],
    v: &Verdict,
    elapsed: Duration,
) {
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
    line("leases expired and rescued", v.rescued.to_string());
    line("stale commits refused by the fence", refused.to_string());
    println!("  (the killed worker's own counts died with it; the rescues above include its jobs)");
    println!(
        "verdict: {}",
        if v.ok() {
            "OK: every job completed, every order got one mail, one receipt number and one \
             move, every transfer moved money once"
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
