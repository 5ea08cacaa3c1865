//! Test-only broken builds: what the features `chaos-break-fence` and
//! `chaos-break-effect-key` share across the crates they break. Compiled only with one of
//! them, and never in a release build (the `compile_error!` in this crate's `lib.rs`,
//! which every crate's features reach).
//!
//! The broken builds exist so the chaos checker can prove that it catches a broken engine
//! (ARCHITECTURE.md, "Test-only broken builds"). What must stay true: a broken build says
//! so, loudly, as it starts ([`announce`]), and a break that no longer applies (its SQL was
//! edited) stops the build at startup instead of silently doing nothing
//! ([`Broken::sql`] panics).

/// One statement of a store's `queries/` with parts of its text replaced: the broken
/// variant kept next to the statement it breaks.
#[cfg(feature = "chaos-break-fence")]
pub struct Broken {
    original: &'static str,
    cuts: &'static [(&'static str, &'static str)],
    text: std::sync::OnceLock<String>,
}

#[cfg(feature = "chaos-break-fence")]
impl Broken {
    /// `original` with each `(from, to)` of `cuts` applied in order.
    pub const fn new(
        original: &'static str,
        cuts: &'static [(&'static str, &'static str)],
    ) -> Broken {
        Broken {
            original,
            cuts,
            text: std::sync::OnceLock::new(),
        }
    }

    /// The broken statement. Panics when a cut's text is missing from the statement or in
    /// it more than once: the file was edited, and the break must be updated with it.
    pub fn sql(&'static self) -> &'static str {
        self.text
            .get_or_init(|| rewrite(self.original, self.cuts))
            .as_str()
    }
}

/// The broken variant of `sql` among `list` (a store's statements as `include_str!` loads
/// them). Panics when it has none: an operation asks only for a statement it lists.
#[cfg(feature = "chaos-break-fence")]
pub fn variant(list: &'static [Broken], sql: &'static str) -> &'static str {
    list.iter()
        .find(|b| b.original == sql)
        .unwrap_or_else(|| panic!("BROKEN BUILD: no broken variant of:\n{sql}"))
        .sql()
}

/// Applies every break of `list` now (panicking on one that no longer applies) and says
/// that this build is broken; a store runs it as it opens.
#[cfg(feature = "chaos-break-fence")]
pub fn check(list: &'static [Broken]) {
    for broken in list {
        broken.sql();
    }
    announce();
}

/// `sql` with each `(from, to)` applied; panics unless each `from` occurs once, no more.
#[cfg(feature = "chaos-break-fence")]
fn rewrite(sql: &str, cuts: &[(&str, &str)]) -> String {
    let mut out = sql.to_owned();
    for (from, to) in cuts {
        let found = out.matches(from).count();
        assert!(
            found == 1,
            "BROKEN BUILD: the text to cut, {from:?}, occurs {found} times (not once) in \
             this statement; it was edited, so update its broken variant:\n{sql}"
        );
        out = out.replacen(from, to, 1);
    }
    out
}

/// The warning of each break, with whether this build has it.
const WARNINGS: [(bool, &str); 2] = [
    (
        cfg!(feature = "chaos-break-fence"),
        "BROKEN BUILD: fence check disabled (chaos-break-fence): stale claims can commit \
         effects and complete jobs; for testing the chaos checker only",
    ),
    (
        cfg!(feature = "chaos-break-effect-key"),
        "BROKEN BUILD: effect key committed outside the effect's transaction \
         (chaos-break-effect-key): a crash after claiming a key loses the effect; for \
         testing the chaos checker only",
    ),
];

/// Says, once per process, on the log and on stderr, that this build is broken and how.
pub fn announce() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (_, line) in WARNINGS.iter().filter(|(on, _)| *on) {
            tracing::warn!("{line}");
            eprintln!("{line}");
        }
    });
}

#[cfg(all(test, feature = "chaos-break-fence"))]
mod tests {
    use super::*;

    #[test]
    fn a_cut_applies_once_or_stops_the_build() {
        let sql = "WHERE id = ?1 AND fence = ?2 AND state = 'running'";
        let cut = [("fence = ?2 AND state = 'running'", "?2 IS NOT NULL")];
        assert_eq!(rewrite(sql, &cut), "WHERE id = ?1 AND ?2 IS NOT NULL");
        let missing = std::panic::catch_unwind(|| rewrite("WHERE id = ?1", &cut));
        assert!(missing.is_err(), "a cut that finds nothing must panic");
    }
}
