//! The independent checker: reads what the producer asked for (its log), what the sink
//! applied (its journals) and the final database ([`snapshot`], over a connection of its
//! own), and counts in plain Rust what went wrong. It shares no code path with the
//! engine or the stores it checks: no idem type, statement or API is used to decide a
//! count.
//!
//! A safety count must be 0; the others describe the run.

mod snapshot;

use std::collections::{BTreeMap, HashMap, HashSet};

use super::asked::Asked;
use snapshot::{Effect, Snapshot};

/// How many copies of each request the sink applied, by the request's `req`.
#[derive(Default)]
pub(super) struct Applied {
    pub(super) keyed: HashMap<u64, usize>,
    pub(super) unkeyed: HashMap<u64, usize>,
}

/// One count, with what it means.
pub(crate) struct Count {
    pub(crate) label: &'static str,
    pub(crate) value: i64,
}

/// What the checker found.
#[derive(Default)]
pub(crate) struct Findings {
    /// Counts that must be 0.
    pub(crate) safety: Vec<Count>,
    /// What the run did, per class.
    pub(crate) seen: Vec<Count>,
    /// Jobs whose lease ran out and that another worker took over.
    pub(crate) rescues: i64,
    /// Remote-call intents taken over from a holder that lost them.
    pub(crate) intent_takeovers: i64,
}

impl Findings {
    /// True when every safety count is 0.
    pub(crate) fn safe(&self) -> bool {
        self.safety.iter().all(|c| c.value == 0)
    }

    fn safety(&mut self, label: &'static str, value: impl TryInto<i64>) {
        let value = value.try_into().unwrap_or(i64::MAX);
        self.safety.push(Count { label, value });
    }

    fn seen(&mut self, label: &'static str, value: impl TryInto<i64>) {
        let value = value.try_into().unwrap_or(i64::MAX);
        self.seen.push(Count { label, value });
    }
}

/// Reads the database at `url` and counts against the producer's log and the sink's
/// journals.
pub(super) async fn check(
    url: &str,
    asked: &[Asked],
    applied: &Applied,
) -> anyhow::Result<Findings> {
    let db = snapshot::read(url).await?;
    Ok(count(asked, applied, &db))
}

fn count(asked: &[Asked], applied: &Applied, db: &Snapshot) -> Findings {
    let mut f = Findings::default();
    jobs(&mut f, asked, db);
    mails(&mut f, asked, db);
    transfers(&mut f, asked, db);
    notes(&mut f, asked, db);
    chains(&mut f, asked, db);
    batches(&mut f, asked, db);
    calls(&mut f, asked, applied, db);
    stale(&mut f, db);
    f
}

/// Rows beyond the first per `about`.
fn twice(effects: &[Effect]) -> usize {
    let mut seen = HashSet::new();
    effects.iter().filter(|e| !seen.insert(e.about)).count()
}

fn completed(db: &Snapshot, job: i64) -> bool {
    db.jobs.get(&job).is_some_and(|j| j.state == "completed")
}

fn jobs(f: &mut Findings, asked: &[Asked], db: &Snapshot) {
    let ids: Vec<i64> = asked.iter().flat_map(Asked::jobs).collect();
    let asked_ids: HashSet<i64> = ids.iter().copied().collect();
    let vanished = ids.iter().filter(|j| !db.jobs.contains_key(j)).count();
    let unfinished = ids
        .iter()
        .filter(|j| db.jobs.get(j).is_some_and(|r| !r.finished()))
        .count();
    let follow_ons = db
        .jobs
        .values()
        .filter(|j| j.follows_job.is_some() || j.follows_batch.is_some());
    let follow_ons_unfinished = follow_ons.clone().filter(|j| !j.finished()).count();
    let unasked = db
        .jobs
        .iter()
        .filter(|(id, j)| {
            !asked_ids.contains(id) && j.follows_job.is_none() && j.follows_batch.is_none()
        })
        .count();
    // A dead job whose call's outcome the remote could not tell is parked for an
    // operator, in sight (the intent is `manual`): not an effect silently left out.
    let parked: HashSet<i64> = (db.intents.iter())
        .filter(|i| i.state == "manual")
        .map(|i| i.job)
        .collect();
    let state = |s: &str| {
        ids.iter()
            .filter(|j| db.jobs.get(j).is_some_and(|r| r.state == s))
            .count()
    };
    let dead_unparked = (ids.iter())
        .filter(|j| db.jobs.get(j).is_some_and(|r| r.state == "dead") && !parked.contains(j))
        .count();
    f.seen("jobs asked for by the producer", ids.len());
    f.seen("  completed", state("completed"));
    f.seen("  dead-lettered", state("dead"));
    f.seen(
        "follow-on jobs (chain links, batch successors)",
        follow_ons.count(),
    );
    f.safety("jobs lost: asked for, row gone", vanished);
    f.safety("jobs lost: asked for, never finished", unfinished);
    // Every job of the workload can complete: one dead-lettered is an effect not made.
    f.safety(
        "jobs dead-lettered, not parked for an operator",
        dead_unparked,
    );
    f.safety(
        "jobs cancelled (nothing in the run cancels)",
        state("cancelled"),
    );
    f.safety("jobs nobody asked for (enqueued twice)", unasked);
    f.safety("follow-on jobs never finished", follow_ons_unfinished);
    f.rescues = db
        .attempts
        .iter()
        .filter(|(_, outcome)| outcome == "lease_expired")
        .count() as i64;
}

fn mails(f: &mut Findings, asked: &[Asked], db: &Snapshot) {
    let orders: HashSet<i64> = asked
        .iter()
        .filter_map(|a| match a {
            Asked::Mail { order, .. } => Some(*order),
            _ => None,
        })
        .collect();
    let requests = asked
        .iter()
        .filter(|a| matches!(a, Asked::Mail { .. }))
        .count();
    let mailed: HashSet<i64> = db.outbox.iter().map(|e| e.about.0).collect();
    let numbers: Vec<i64> = db.outbox.iter().map(|e| e.value).collect();
    let distinct: HashSet<i64> = numbers.iter().copied().collect();
    let highest = numbers.iter().copied().max().unwrap_or(0);
    let changed: Vec<Effect> = db
        .moves
        .iter()
        .filter(|(_, outcome)| outcome == "changed")
        .map(|(e, _)| e.clone())
        .collect();
    let left = orders
        .iter()
        .filter(|o| db.orders.get(o).is_none_or(|s| s != "receipted"))
        .count();
    f.seen("receipt mails asked for (requests / orders)", requests);
    f.seen("  distinct orders", orders.len());
    f.safety("receipt mails sent twice", twice(&db.outbox));
    f.safety("receipt mails missing", orders.difference(&mailed).count());
    f.safety("receipt numbers used twice", numbers.len() - distinct.len());
    let below_one = distinct.iter().filter(|n| **n < 1).count() as i64;
    f.safety(
        "receipt numbers skipped or below 1",
        (highest - distinct.len() as i64).max(0) + below_one,
    );
    f.safety("orders moved paid → receipted twice", twice(&changed));
    f.safety("orders left unreceipted", left);
    let conflicts = db.moves.iter().filter(|(_, o)| o == "conflict").count();
    f.safety("orders found in neither state", conflicts);
}

fn transfers(f: &mut Findings, asked: &[Asked], db: &Snapshot) {
    let mut distinct = BTreeMap::new();
    for a in asked {
        if let Asked::Transfer {
            id,
            from,
            to,
            amount,
            ..
        } = a
        {
            distinct.insert(*id, (from.clone(), to.clone(), *amount));
        }
    }
    let mut expected: HashMap<String, i64> = HashMap::new();
    for (from, to, amount) in distinct.values() {
        *expected.entry(from.clone()).or_default() -= amount;
        *expected.entry(to.clone()).or_default() += amount;
    }
    let entries: HashSet<&str> = db.entries.iter().map(|e| e.0.as_str()).collect();
    let missing = distinct
        .keys()
        .filter(|id| {
            ["debit", "credit"]
                .iter()
                .any(|side| !entries.contains(format!("transfer:{id}:{side}").as_str()))
        })
        .count();
    let mut summed: HashMap<&str, i64> = HashMap::new();
    for (_, account, amount) in &db.entries {
        *summed.entry(account).or_default() += amount;
    }
    let accounts: HashSet<&str> = summed
        .keys()
        .copied()
        .chain(db.balances.keys().map(String::as_str))
        .collect();
    let unequal = accounts
        .iter()
        .filter(|a| {
            summed.get(*a).copied().unwrap_or(0) != db.balances.get(**a).copied().unwrap_or(0)
        })
        .count();
    let off = accounts
        .iter()
        .chain(
            expected
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .iter(),
        )
        .collect::<HashSet<_>>()
        .into_iter()
        .filter(|a| {
            expected.get(**a).copied().unwrap_or(0) != db.balances.get(**a).copied().unwrap_or(0)
        })
        .count();
    let requests = asked
        .iter()
        .filter(|a| matches!(a, Asked::Transfer { .. }))
        .count();
    f.seen("ledger transfers asked for (requests)", requests);
    f.seen("  distinct transfers", distinct.len());
    f.safety("ledger transfers missing an entry", missing);
    f.safety("ledger totals unequal to their entries", unequal);
    f.safety("ledger balances unequal to the transfers asked", off);
}

fn notes(f: &mut Findings, asked: &[Asked], db: &Snapshot) {
    let written: HashSet<i64> = db.notes.iter().map(|e| e.job).collect();
    let notes: Vec<i64> = asked
        .iter()
        .filter_map(|a| match a {
            Asked::Note { job, .. } => Some(*job),
            _ => None,
        })
        .collect();
    let missing = notes
        .iter()
        .filter(|j| completed(db, **j) && !written.contains(j))
        .count();
    let pings = asked
        .iter()
        .filter(|a| matches!(a, Asked::Ping { .. }))
        .count();
    f.seen("notes asked for (fenced, no effect key)", notes.len());
    f.seen("pings asked for (batched completion)", pings);
    f.safety("notes written twice", twice(&db.notes));
    f.safety("notes missing", missing);
}

fn chains(f: &mut Findings, asked: &[Asked], db: &Snapshot) {
    let mut missing = 0i64;
    let mut chains = 0;
    let steps: HashSet<(i64, i64)> = db.links.iter().map(|e| e.about).collect();
    for a in asked {
        if let Asked::Chain { chain, links, .. } = a {
            chains += 1;
            missing += (0..*links)
                .filter(|s| !steps.contains(&(*chain, *s)))
                .count() as i64;
        }
    }
    // A link's successor is enqueued in its effect transaction: one per link at most.
    let mut next: HashMap<i64, usize> = HashMap::new();
    for j in db.jobs.values() {
        if let Some(link) = j.follows_job {
            *next.entry(link).or_default() += 1;
        }
    }
    let lengths: HashMap<i64, i64> = asked
        .iter()
        .filter_map(|a| match a {
            Asked::Chain { chain, links, .. } => Some((*chain, *links)),
            _ => None,
        })
        .collect();
    let beyond = db
        .links
        .iter()
        .filter(|e| lengths.get(&e.about.0).is_none_or(|n| e.about.1 >= *n))
        .count();
    f.seen("chains asked for", chains);
    f.safety("chain links recorded twice", twice(&db.links));
    f.safety("chain links missing", missing);
    f.safety(
        "chain links enqueued twice",
        next.values().map(|n| n - 1).sum::<usize>(),
    );
    f.safety("chain links beyond their chain", beyond);
}

fn batches(f: &mut Findings, asked: &[Asked], db: &Snapshot) {
    let mut successors: HashMap<i64, usize> = HashMap::new();
    for j in db.jobs.values() {
        if let Some(b) = j.follows_batch {
            *successors.entry(b).or_default() += 1;
        }
    }
    let mut totals: HashMap<i64, Vec<i64>> = HashMap::new();
    for t in &db.totals {
        totals.entry(t.about.0).or_default().push(t.value);
    }
    let tallied: HashMap<(i64, i64), i64> = db.tallies.iter().map(|e| (e.about, e.value)).collect();
    let (mut asked_batches, mut wrong, mut tallies_wrong) = (HashSet::new(), 0, 0);
    for a in asked {
        if let Asked::Batch {
            batch, children, ..
        } = a
        {
            asked_batches.insert(*batch);
            let sum: i64 = children.iter().map(|c| c.2).sum();
            if totals
                .get(batch)
                .is_none_or(|t| t.iter().any(|total| *total != sum))
            {
                wrong += 1;
            }
            tallies_wrong += children
                .iter()
                .filter(|c| tallied.get(&(*batch, c.1)) != Some(&c.2))
                .count();
        }
    }
    let not_one = asked_batches
        .iter()
        .chain(&db.batches)
        .collect::<HashSet<_>>()
        .into_iter()
        .filter(|b| successors.get(b).copied().unwrap_or(0) != 1)
        .count();
    f.seen("batches asked for", asked_batches.len());
    f.safety("batches without exactly one successor", not_one);
    f.safety("batch totals wrong or missing", wrong);
    f.safety("batch totals recorded twice", twice(&db.totals));
    f.safety("shop tallies recorded twice", twice(&db.tallies));
    f.safety("shop tallies wrong or missing", tallies_wrong);
}

fn calls(f: &mut Findings, asked: &[Asked], applied: &Applied, db: &Snapshot) {
    let intents: HashMap<i64, _> = db.intents.iter().map(|i| (i.job, i)).collect();
    let (mut keyed, mut unkeyed, mut keyed_twice, mut never_applied) = (0, 0, 0, 0);
    let (mut extra, mut visible, mut silent, mut hidden_applied) = (0, 0, 0, 0);
    for a in asked {
        let Asked::Call {
            req, job, keyed: k, ..
        } = a
        else {
            continue;
        };
        let state = intents.get(job).map(|i| i.state.as_str());
        let copies = match k {
            true => applied.keyed.get(req).copied().unwrap_or(0),
            false => applied.unkeyed.get(req).copied().unwrap_or(0),
        };
        if copies == 0 && completed(db, *job) {
            never_applied += 1;
        }
        if copies > 0 && matches!(state, Some("failed" | "released") | None) {
            hidden_applied += 1;
        }
        match k {
            true => {
                keyed += 1;
                keyed_twice += copies.saturating_sub(1);
            }
            false => {
                unkeyed += 1;
                extra += copies.saturating_sub(1);
                match (copies > 1, state) {
                    // Marked duplicate, or parked for an operator: either way in sight.
                    (true, Some("duplicate" | "manual")) => visible += 1,
                    (true, _) => silent += 1,
                    _ => {}
                }
            }
        }
    }
    let by_state = |s: &str| db.intents.iter().filter(|i| i.state == s).count();
    f.seen("keyed remote calls asked for", keyed);
    f.seen("unkeyed remote calls asked for", unkeyed);
    f.seen("  extra copies the unkeyed sink applied", extra);
    f.seen("  calls applied twice, marked duplicate or manual", visible);
    f.seen(
        "  unknown outcomes parked for an operator",
        by_state("manual"),
    );
    f.safety("keyed calls applied twice at the sink", keyed_twice);
    f.safety("unkeyed calls applied twice silently", silent);
    f.safety("remote calls completed, never applied", never_applied);
    f.safety(
        "unknown outcomes not surfaced",
        by_state("unknown") + hidden_applied,
    );
    f.safety(
        "intents stuck in progress past their lease",
        db.intents
            .iter()
            .filter(|i| i.state == "in_progress" && i.expired)
            .count(),
    );
    f.intent_takeovers = db.intents.iter().map(|i| (i.attempt - 1).max(0)).sum();
}

/// Effect rows written by a claim that is not the one that completed its job.
fn stale(f: &mut Findings, db: &Snapshot) {
    let moves = db.moves.iter().map(|(e, _)| e);
    let all = db
        .outbox
        .iter()
        .chain(moves)
        .chain(&db.notes)
        .chain(&db.links)
        .chain(&db.tallies)
        .chain(&db.totals);
    let stale = all
        .filter(|e| {
            db.jobs
                .get(&e.job)
                .is_none_or(|j| j.state != "completed" || j.fence != e.fence)
        })
        .count();
    f.safety("effects committed under a stale fence", stale);
}

#[cfg(test)]
mod tests;
