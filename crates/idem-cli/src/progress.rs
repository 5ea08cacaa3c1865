//! Progress bars and spinners of long operations (purge, bulk dead-letter actions,
//! migrate, ledger repair, demo, chaos, bench).
//!
//! What must stay true: they are drawn on stderr, only when stderr is a terminal and `-q`
//! was not given; stdout stays the command's output (a script reading it, or `--json`,
//! never sees a bar).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting `len` things, with `msg` before it.
pub fn bar(len: u64, msg: impl Into<String>) -> ProgressBar {
    let template = "{msg} [{bar:30}] {pos}/{len} ({per_sec})";
    shown(styled(ProgressBar::new(len), template), msg)
}

/// A spinner for an operation that cannot count its steps, with `msg` beside it.
pub fn spinner(msg: impl Into<String>) -> ProgressBar {
    let template = "{spinner} {msg} [{elapsed}]";
    let spinner = shown(styled(ProgressBar::new_spinner(), template), msg);
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}

/// A bar of `len` steps drawn with `template` (an indicatif template).
pub fn with_template(len: u64, template: &str) -> ProgressBar {
    styled(ProgressBar::new(len), template)
}

/// `bar` with its message, drawn at once (an operation shorter than a tick is seen too).
fn shown(bar: ProgressBar, msg: impl Into<String>) -> ProgressBar {
    bar.set_message(msg.into());
    bar.tick();
    bar
}

/// `bar` with `template`, drawn on stderr only if [`visible`].
fn styled(bar: ProgressBar, template: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .expect("a valid progress template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_draw_target(match visible() {
        true => ProgressDrawTarget::stderr(),
        false => ProgressDrawTarget::hidden(),
    });
    bar
}

/// Whether progress is drawn: stderr is a terminal and `-q` was not given.
pub fn visible() -> bool {
    !crate::verbosity::quiet() && std::io::stderr().is_terminal()
}
