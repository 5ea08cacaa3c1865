//! `idem guarantees`: what idem promises for each effect class, and for each job kind
//! this binary registers (the built-in kinds and the demo's); `--json` prints the same
//! (`docs/cli-json.md`).

use std::process::ExitCode;

use idem::EffectClass;
use idem::builtin::Http;
use serde::Serialize;

use crate::output::{Format, print_json};
use crate::table::{Table, left};

/// An effect class: what it guarantees and by which mechanism.
#[derive(Serialize)]
struct Class {
    class: &'static str,
    guarantee: &'static str,
    mechanism: &'static str,
}

/// A job kind this binary runs, with its class.
#[derive(Serialize)]
struct Kind {
    kind: String,
    class: &'static str,
    guarantee: &'static str,
}

/// Prints the classes, then the built-in kinds and `demo_kinds`.
pub fn run(demo_kinds: &[(String, EffectClass)], format: Format) -> anyhow::Result<ExitCode> {
    let classes: Vec<Class> = EffectClass::ALL
        .into_iter()
        .map(|c| Class {
            class: c.as_str(),
            guarantee: c.guarantee(),
            mechanism: c.mechanism(),
        })
        .collect();
    let kinds = kinds(demo_kinds);
    if format.json {
        print_json(&serde_json::json!({ "classes": classes, "kinds": kinds }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("Delivery is at-least-once: a handler may run more than once. What each effect");
    println!("class guarantees about the handler's effect:");
    println!();
    for c in &classes {
        println!("  {:<14} {}", c.class, c.guarantee);
        println!("  {:<14} mechanism: {}", "", c.mechanism);
    }
    println!();
    let mut table = Table::new(&[
        left("job kind", 40),
        left("effect class", 14),
        left("guarantee", 100),
    ]);
    for k in &kinds {
        table.row(vec![
            k.kind.clone(),
            k.class.to_owned(),
            k.guarantee.to_owned(),
        ]);
    }
    table.print();
    Ok(ExitCode::SUCCESS)
}

/// The built-in kinds and `demo_kinds`.
fn kinds(demo_kinds: &[(String, EffectClass)]) -> Vec<Kind> {
    (builtin_kinds().iter().chain(demo_kinds))
        .map(|(kind, class)| Kind {
            kind: kind.clone(),
            class: class.as_str(),
            guarantee: class.guarantee(),
        })
        .collect()
}

/// The built-in kinds with their effect classes, `http` once per class it can have (as
/// `idem guarantees` and the dashboard's guarantees page list them).
pub fn builtin_kinds() -> Vec<(String, EffectClass)> {
    let http = <Http as idem::Handler>::KIND;
    vec![
        (http.to_owned(), EffectClass::KeyedRemote),
        (format!("{http} (keyed: false)"), EffectClass::UnkeyedRemote),
    ]
}
