//! `idem guarantees`: what idem promises for each effect class, and for each job kind
//! this binary registers (the built-in kinds and the demo's).

use std::process::ExitCode;

use idem::EffectClass;
use idem::builtin::Http;

/// Prints the classes, then the built-in kinds and `demo_kinds`.
pub fn run(demo_kinds: &[(String, EffectClass)]) -> ExitCode {
    println!("Delivery is at-least-once: a handler may run more than once. What each effect");
    println!("class guarantees about the handler's effect:");
    println!();
    for class in EffectClass::ALL {
        println!("  {:<14} {}", class.as_str(), class.guarantee());
        println!("  {:<14} mechanism: {}", "", class.mechanism());
    }
    println!();
    println!("{:<24} {:<14} guarantee", "job kind", "effect class");
    let http = <Http as idem::Handler>::KIND;
    let row = |kind: &str, class: EffectClass| {
        println!("{kind:<24} {:<14} {}", class.as_str(), class.guarantee());
    };
    row(http, EffectClass::KeyedRemote);
    row(
        &format!("{http} (keyed: false)"),
        EffectClass::UnkeyedRemote,
    );
    for (kind, class) in demo_kinds {
        row(kind, *class);
    }
    ExitCode::SUCCESS
}
