//! `idem completions SHELL`: a script for each shell, generated from the command line's
//! own definition, that names the commands an operator uses and none of the hidden ones,
//! and that the shell accepts.

mod common;

use common::*;

/// The commands and global flags `idem --help` lists.
const COMMANDS: [&str; 22] = [
    "demo",
    "bench",
    "chaos",
    "migrate",
    "enqueue",
    "serve",
    "worker",
    "jobs",
    "batches",
    "queues",
    "dead",
    "intents",
    "reconcile",
    "purge",
    "ledger",
    "guarantees",
    "config",
    "completions",
    "help",
    "--database-url",
    "--quiet",
    "--version",
];

fn completions(tmp: &std::path::Path, shell: &str) -> Out {
    let mut cmd = idem(tmp);
    cmd.args(["completions", shell]);
    output(cmd, vec!["completions".into(), shell.into()])
}

#[test]
fn the_bash_script_names_the_commands_and_bash_accepts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = completions(tmp.path(), "bash");
    out.expect(0);
    let opts = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("opts=\"-v -q"))
        .unwrap_or_else(|| panic!("no top-level opts line; {out}"));
    let words: Vec<&str> = opts
        .trim()
        .trim_start_matches("opts=\"")
        .trim_end_matches('"')
        .split(' ')
        .collect();
    for command in COMMANDS {
        assert!(words.contains(&command), "{command} not offered: {opts}");
    }
    assert!(
        !out.stdout.contains("chaos-worker"),
        "a hidden command is offered"
    );
    for sub in ["retry --all", "--ids-from", "--dry-run", "--yes"] {
        let first = sub.split(' ').next_back().unwrap();
        assert!(out.stdout.contains(first), "{first} not offered");
    }
    let script = tmp.path().join("idem.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("run bash -n");
    assert!(
        check.status.success(),
        "bash -n refused the script: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn every_shell_gets_a_script_and_an_unknown_shell_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = completions(tmp.path(), shell);
        out.expect(0);
        assert!(out.stdout.contains("reconcile"), "{shell}; {out}");
        assert!(out.stderr.is_empty(), "{shell}; {out}");
    }
    completions(tmp.path(), "tcsh")
        .expect(USAGE)
        .warns(&["tcsh", "bash"]);
    assert_eq!(entries(tmp.path()), Vec::<String>::new(), "it wrote a file");
}
