//! `idem guarantees`: what idem promises for each effect class, and for each job kind
//! this binary registers.

use std::process::ExitCode;

/// Prints the classes and the kinds.
pub fn run(kinds: &[(String, idem::EffectClass)]) -> ExitCode {
    println!("Delivery is at-least-once: a handler may run more than once. What each effect");
    println!("class guarantees about the handler's effect:");
    println!();
    for class in idem::EffectClass::ALL {
        println!("  {:<14} {}", class.as_str(), class.guarantee());
        println!("  {:<14} mechanism: {}", "", class.mechanism());
        if !class.built() {
            println!(
                "  {:<14} planned: not built yet; jobs of this class run at-least-once today",
                ""
            );
        }
    }
    println!();
    println!("{:<24} {:<14} guarantee today", "job kind", "effect class");
    for (kind, class) in kinds {
        println!(
            "{kind:<24} {:<14} {}",
            class.as_str(),
            class.guarantee_now()
        );
    }
    ExitCode::SUCCESS
}
