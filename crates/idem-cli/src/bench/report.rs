//! Printing the figures of `idem bench`: a table for people, JSON for scripts.

use idem::Backend;
use serde::Serialize;

use super::{BenchArgs, Figure};

#[derive(Serialize)]
struct JsonReport<'a> {
    store: &'static str,
    database: &'a str,
    settings: &'a BenchArgs,
    machine: Machine,
    figures: Vec<JsonFigure<'a>>,
}

#[derive(Serialize)]
struct JsonFigure<'a> {
    #[serde(flatten)]
    figure: &'a Figure,
    ratio: Option<f64>,
}

#[derive(Serialize)]
struct Machine {
    cpus: usize,
    os: &'static str,
}

/// Prints the results.
pub fn print(
    args: &BenchArgs,
    backend: Backend,
    database: &str,
    figures: &[Figure],
) -> anyhow::Result<()> {
    let machine = Machine {
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        os: std::env::consts::OS,
    };
    if args.json {
        let figures = figures
            .iter()
            .map(|f| JsonFigure {
                figure: f,
                ratio: f.ratio(),
            })
            .collect();
        let report = JsonReport {
            store: backend.name(),
            database,
            settings: args,
            machine,
            figures,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("idem bench on {database}");
    println!(
        "settings: jobs {}, concurrency {}, claim batch {}, bulk batch {}, SQLite synchronous {}, \
         history {}, local dispatch {}, {} CPUs{}",
        args.jobs,
        args.concurrency,
        args.claim_batch,
        args.bulk_batch,
        args.synchronous,
        args.history,
        if args.no_local_dispatch { "off" } else { "on" },
        machine.cpus,
        if args.smoke {
            " (SMOKE: sizes too small to mean anything)"
        } else {
            ""
        }
    );
    println!();
    println!(
        "{:<14} {:<34} {:>12} {:<7} {:>12} {:>7}",
        "scenario", "figure", "engine", "unit", "ceiling", "ratio"
    );
    for f in figures {
        let ceiling = f
            .ceiling
            .map(|c| format!("{c:.1}"))
            .unwrap_or_else(|| "-".into());
        let ratio = f
            .ratio()
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into());
        let name = f.scenario.to_string();
        println!(
            "{name:<14} {:<34} {:>12.1} {:<7} {ceiling:>12} {ratio:>7}",
            f.metric, f.value, f.unit
        );
        for (i, c) in f.other_ceilings.iter().enumerate() {
            let label = format!("  (ceiling {})", i + 2);
            println!(
                "{name:<14} {label:<34} {:>12} {:<7} {:>12.1} {:>7.2}",
                "",
                f.unit,
                c.value,
                f.value / c.value.max(1e-9)
            );
        }
    }
    println!();
    for f in figures.iter().filter(|f| !f.note.is_empty()) {
        println!("  {:<34} {}", f.metric, f.note);
        for (i, c) in f.other_ceilings.iter().enumerate() {
            println!("  {:<34} ceiling {}: {}", "", i + 2, c.what);
        }
    }
    Ok(())
}
