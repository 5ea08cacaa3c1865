//! Printing a run's report: the faults injected, what the workload did, the counters that
//! prove the faults hit, every safety count the checker found, and the verdict.

use super::{Outcome, Plan};

/// Faults listed one per line before the report (the rest are counted only): every
/// fault of the CI smoke tier's runs, each with its time, so that a slow run can be
/// read from CI's log (one failover run there took 138 s against 33–37 s for the others).
const EVENTS_SHOWN: usize = 40;

/// Prints the report of a finished run.
pub(super) fn print(plan: &Plan, o: &Outcome) {
    let events = &o.faults.events;
    println!();
    for e in events.iter().take(EVENTS_SHOWN) {
        println!("fault: {e}");
    }
    if events.len() > EVENTS_SHOWN {
        println!("fault: … and {} more", events.len() - EVENTS_SHOWN);
    }
    for e in &o.faults.failover_events {
        println!("failover: {e}");
    }
    let line = |label: &str, value: String, mark: &str| println!("  {label:<50} {value:>8} {mark}");
    println!(
        "report ({:.1} s, {}), counted by the independent checker:",
        o.elapsed.as_secs_f64(),
        o.database
    );
    println!(" what the run did");
    for c in &o.findings.seen {
        line(c.label, c.value.to_string(), "");
    }
    println!(" the faults hit (each planned kill, zombie and restart; at least one of the others)");
    for (label, value, least) in o.proof(plan) {
        let mark = if value < least {
            format!("← NOT HIT (needs {least})")
        } else {
            String::new()
        };
        line(label, value.to_string(), &mark);
    }
    println!(" safety (each must be 0)");
    for c in &o.findings.safety {
        let mark = if c.value == 0 { "" } else { "← FAILED" };
        line(c.label, c.value.to_string(), mark);
    }
    let verdict = match (o.findings.safe(), o.passed(plan)) {
        (true, false) if !o.faults.late.is_empty() => {
            "FAILED: workers were not back within the bound after the failover"
        }
        (true, true) => {
            "OK: no job lost, no effect made twice or left out, none committed by a stale \
             claim, every duplicate at the unkeyed remote made visible, every unknown outcome \
             settled, every batch with one successor, and every ledger total equal to its \
             entries"
        }
        (true, false) => "INCONCLUSIVE: nothing unsafe was found, but a planned fault never hit",
        (false, _) => "FAILED: the checker found the safety counts marked above",
    };
    println!("verdict: {verdict}");
}
