//! `idem completions SHELL`: the completion script of a shell, generated from the same
//! clap definition that parses the command line, so it never lists a command or flag
//! the binary lacks (hidden commands stay out).

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use clap_complete::Shell;

/// Arguments of `idem completions`.
#[derive(Args)]
#[command(after_help = "\
Install, e.g.:
  bash:  idem completions bash > ~/.local/share/bash-completion/completions/idem
  zsh:   idem completions zsh > ~/.zfunc/_idem   (with fpath+=~/.zfunc before compinit)
  fish:  idem completions fish > ~/.config/fish/completions/idem.fish")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell
    shell: Shell,
}

/// Prints the script of `args.shell` for `cli` on stdout.
pub fn run(args: CompletionsArgs, cli: clap::Command) -> anyhow::Result<ExitCode> {
    let mut shown = without_hidden(cli);
    // Into a buffer first: the generators panic on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut shown, "idem", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// `cli` without its hidden subcommands (the demo's worker and sink processes), which
/// the generators would otherwise offer.
fn without_hidden(cli: clap::Command) -> clap::Command {
    let shown: Vec<clap::Command> = cli
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let args: Vec<clap::Arg> = cli.get_arguments().cloned().collect();
    clap::Command::new("idem")
        .version(env!("CARGO_PKG_VERSION"))
        .args(args)
        .subcommands(shown)
}
