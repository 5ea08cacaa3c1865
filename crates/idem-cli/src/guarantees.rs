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
    for (kind, class) in builtin_kinds().iter().chain(demo_kinds) {
        println!("{kind:<24} {:<14} {}", class.as_str(), class.guarantee());
    }
    ExitCode::SUCCESS
}

/// The built-in kinds with their effect classes, `http` once per class it can have (as
/// `idem guarantees` and the dashboard's guarantees page list them).
pub fn builtin_kinds() -> Vec<(String, EffectClass)> {
    let http = <Http as idem::Handler>::KIND;
    vec![
        (http.to_string(), EffectClass::KeyedRemote),
        (format!("{http} (keyed: false)"), EffectClass::UnkeyedRemote),
    ]
}
