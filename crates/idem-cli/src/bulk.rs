//! Which dead jobs a bulk action (`idem dead retry|discard`) takes, previewed before it
//! acts: listed ids, ids read from a file (`--ids-from`, e.g. an earlier
//! `--dry-run --json`), or `--all` matching `--queue`/`--kind`.
//!
//! What must stay true: **a bulk action acts only on the ids it previewed.** `--all`
//! lists the matching ids once, shows their count and ids, asks on a terminal (or takes
//! `--yes`), and then hands those very ids to the action: a job that died after the
//! preview is not among them and is left alone. Without a terminal and without `--yes`,
//! `--all` acts on nothing (exit 2). `--dry-run` only previews.

use std::io::{BufRead, IsTerminal, Read, Write};

use clap::Args;
use idem::{DeadFilter, Idem};
use serde::{Deserialize, Serialize};

use crate::exit::{Exit, fail};
use crate::jobs::FilterArgs;
use crate::output::Format;

/// Ids a preview names one by one in text; the rest are counted (`--json` has them all).
const NAMED_IDS: usize = 20;

/// The selection flags of `idem dead retry|discard`.
#[derive(Args)]
pub struct Selection {
    /// Job ids
    ids: Vec<i64>,
    /// Every dead job matching --queue and --kind: previewed (count and ids), confirmed
    /// on a terminal or with --yes, then only the previewed ids are acted on
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    filter: FilterArgs,
    /// Act on the ids in FILE (`-` for stdin): the output of an earlier `--dry-run
    /// --json`, a JSON array of ids, or ids separated by white space or commas
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ids", "all"])]
    ids_from: Option<String>,
    /// Only preview: print the count and the ids the action would take, act on none
    #[arg(long)]
    pub dry_run: bool,
    /// Act on the --all selection without asking
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    pub format: Format,
}

/// What a bulk action would take: the `--dry-run --json` document, which `--ids-from`
/// reads back.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub struct Preview {
    /// `retry` or `discard`.
    pub action: String,
    /// The filter of `--all` (`null` when not given, or for listed ids).
    pub queue: Option<String>,
    /// The kind filter of `--all`.
    pub kind: Option<String>,
    /// How many ids.
    pub count: usize,
    /// The ids, newest first for `--all`, else as given.
    pub ids: Vec<i64>,
}

impl Selection {
    /// The ids `action` takes, previewed and, for `--all`, confirmed. `None` after a
    /// dry run (the preview is printed) or when `--all` matched nothing on a terminal
    /// (with `--yes` an empty selection goes on and does nothing).
    pub async fn pick(&self, idem: &Idem, action: &str) -> anyhow::Result<Option<Vec<i64>>> {
        let preview = self.preview(idem, action).await?;
        if self.dry_run {
            self.print(&preview)?;
            return Ok(None);
        }
        if self.all && !self.confirm(&preview)? {
            crate::verbosity::say(format!("no dead job matches: nothing to {action}"));
            return Ok(None);
        }
        Ok(Some(preview.ids))
    }

    async fn preview(&self, idem: &Idem, action: &str) -> anyhow::Result<Preview> {
        let ids = self.ids(idem, action).await?;
        let (queue, kind) = (self.filter.queue.clone(), self.filter.kind.clone());
        Ok(Preview {
            action: action.to_owned(),
            queue,
            kind,
            count: ids.len(),
            ids,
        })
    }

    /// The ids to preview: listed, read from `--ids-from`, or every matching dead job.
    async fn ids(&self, idem: &Idem, action: &str) -> anyhow::Result<Vec<i64>> {
        let filtered = self.filter.queue.is_some() || self.filter.kind.is_some();
        if let Some(path) = &self.ids_from {
            return match filtered {
                true => Err(usage("--queue and --kind filter --all, not --ids-from")),
                false => read_ids(path, action),
            };
        }
        match (self.all, self.ids.is_empty()) {
            (true, true) => {
                let spinner = crate::progress::spinner("listing the matching dead jobs");
                let filter = DeadFilter {
                    queue: self.filter.queue.clone(),
                    kind: self.filter.kind.clone(),
                };
                let ids = idem.dead_ids(&filter).await;
                spinner.finish_and_clear();
                Ok(ids?)
            }
            (false, false) if !filtered => Ok(self.ids.clone()),
            (false, false) => Err(usage(
                "--queue and --kind filter --all; give ids or --all, not both",
            )),
            (true, false) => Err(usage("give job ids or --all, not both")),
            (false, true) => Err(usage(
                "give the ids of the dead jobs, --ids-from FILE, or --all (with --queue/--kind \
                 to narrow it)",
            )),
        }
    }

    /// The preview of a dry run: JSON, or its count and ids for people.
    fn print(&self, preview: &Preview) -> anyhow::Result<()> {
        if self.format.json {
            return crate::output::print_json(preview);
        }
        println!("{}", describe(preview));
        println!(
            "nothing was done (--dry-run); to act on these ids and no others: \
             `idem dead {} … --dry-run --json > preview.json`, then `idem dead {} \
             --ids-from preview.json`",
            preview.action, preview.action
        );
        Ok(())
    }

    /// Goes on with `--yes`, or when the person at the terminal answers yes; refuses
    /// without a terminal (exit 2, however many match, so that a script fails the same
    /// way on an empty selection) and on any other answer (exit 1). `false`: nothing
    /// matched, nothing to ask.
    fn confirm(&self, preview: &Preview) -> anyhow::Result<bool> {
        if self.yes {
            return Ok(true);
        }
        let action = &preview.action;
        let terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        if !terminal {
            return Err(usage(&format!(
                "{}; {action} acts on --all only with --yes (or on a terminal, after asking); \
                 to act on exactly the previewed ids, preview with --dry-run --json and \
                 act with --ids-from",
                describe(preview)
            )));
        }
        if preview.ids.is_empty() {
            return Ok(false);
        }
        eprint!(
            "{}\n{action} these {} job(s)? [y/N] ",
            describe(preview),
            preview.count
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        match answer.trim() {
            "y" | "Y" | "yes" => Ok(true),
            _ => Err(fail(
                Exit::Refused,
                format!("not confirmed: nothing to {action}"),
            )),
        }
    }
}

/// `3 dead job(s) match (queue mail): 12, 9, 7`, the first [`NAMED_IDS`] ids named.
fn describe(p: &Preview) -> String {
    let mut filter: Vec<String> = Vec::new();
    if let Some(q) = &p.queue {
        filter.push(format!("queue {q}"));
    }
    if let Some(k) = &p.kind {
        filter.push(format!("kind {k}"));
    }
    let filter = match filter.is_empty() {
        true => String::new(),
        false => format!(" ({})", crate::table::cell(&filter.join(", "), 200)),
    };
    let mut ids: Vec<String> = p.ids.iter().take(NAMED_IDS).map(i64::to_string).collect();
    if p.ids.len() > NAMED_IDS {
        ids.push(format!("… and {} more", p.ids.len() - NAMED_IDS));
    }
    format!("{} job(s) selected{filter}: {}", p.count, ids.join(", "))
}

fn usage(message: &str) -> anyhow::Error {
    fail(Exit::Usage, message)
}

/// The ids in the file at `path` (`-` = stdin), for `action`.
fn read_ids(path: &str, action: &str) -> anyhow::Result<Vec<i64>> {
    let mut text = String::new();
    let read = match path {
        "-" => std::io::stdin().read_to_string(&mut text).map(|_| ()),
        _ => std::fs::read_to_string(path).map(|t| text = t),
    };
    read.map_err(|e| usage(&format!("--ids-from {path:?} cannot be read: {e}")))?;
    let ids = parse_ids(&text, action).map_err(|e| usage(&format!("--ids-from {path:?}: {e}")))?;
    match ids.is_empty() {
        true => Err(usage(&format!("--ids-from {path:?} holds no job id"))),
        false => Ok(ids),
    }
}

/// Ids from a preview (refused when it previewed another action), a JSON array, or
/// numbers separated by white space or commas.
fn parse_ids(text: &str, action: &str) -> Result<Vec<i64>, String> {
    let shapes = "expected the output of `--dry-run --json`, a JSON array of ids, or ids \
                  separated by white space or commas";
    match text.trim_start().chars().next() {
        Some('{') => {
            let p: Preview = serde_json::from_str(text).map_err(|e| format!("{e}; {shapes}"))?;
            match p.action == action {
                true => Ok(p.ids),
                false => Err(format!(
                    "it previews a {}, not a {action}: preview the {action} itself",
                    p.action
                )),
            }
        }
        Some('[') => serde_json::from_str(text).map_err(|e| format!("{e}; {shapes}")),
        _ => text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .map(|w| {
                w.parse()
                    .map_err(|_| format!("{w:?} is not a job id; {shapes}"))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_from_a_preview_an_array_or_words() {
        let preview = r#"{"action":"retry","queue":null,"kind":null,"count":2,"ids":[9,4]}"#;
        assert_eq!(parse_ids(preview, "retry"), Ok(vec![9, 4]));
        assert!(
            parse_ids(preview, "discard")
                .unwrap_err()
                .contains("previews a retry")
        );
        assert_eq!(parse_ids(" [3, 1]\n", "retry"), Ok(vec![3, 1]));
        assert_eq!(parse_ids("3\n1, 2 ", "retry"), Ok(vec![3, 1, 2]));
        assert!(parse_ids("3 x", "retry").unwrap_err().contains("\"x\""));
    }

    #[test]
    fn a_long_preview_names_the_first_ids_and_counts_the_rest() {
        let p = Preview {
            action: "retry".into(),
            queue: Some("mail".into()),
            kind: None,
            count: 25,
            ids: (1..=25).rev().collect(),
        };
        let text = describe(&p);
        assert!(
            text.starts_with("25 job(s) selected (queue mail): 25, 24,"),
            "{text}"
        );
        assert!(text.ends_with("6, … and 5 more"), "{text}");
    }
}
