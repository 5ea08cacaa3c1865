//! Checks of the checker with no database: a small world built by hand, consistent in
//! every table the checker reads (one request of every class, a repeated mail and a
//! repeated transfer, a chain with its later links, a batch with its successor), must
//! raise no safety count; each fault then breaks that world in one way and must raise
//! the count it names and no other, unless the fault cannot leave one table wrong
//! without another (then both are named, and the fault says why).
//!
//! Every expected count is found by its label, so a count renamed or dropped from
//! [`count`] fails here by name, and one test asks that every safety count is raised by
//! some fault.

use std::collections::{BTreeMap, BTreeSet};

use super::snapshot::{Effect, IntentSeen, JobSeen, Snapshot};
use super::{Applied, Count, Findings, count};
use crate::chaos::asked::Asked;

const ORDER: i64 = 500;
const OTHER_ORDER: i64 = 501;
const CHAIN: i64 = 1;
const BATCH: i64 = 50;
const KEYED_REQ: u64 = 9;
const UNKEYED_REQ: u64 = 10;

// Jobs: the producer's request `n` is job `100 + n`; the chain's later links, the
// batch's children and its successor follow.
const MAIL: i64 = 101;
const REPEAT_MAIL: i64 = 102;
const OTHER_MAIL: i64 = 103;
const NOTE: i64 = 107;
const PING: i64 = 108;
const KEYED: i64 = 109;
const UNKEYED: i64 = 110;
const LINK_0: i64 = 111;
const LINK_1: i64 = 112;
const LINK_2: i64 = 113;
const CHILD_1: i64 = 121;
const CHILD_2: i64 = 122;
const SUCCESSOR: i64 = 123;

const VANISHED: &str = "jobs lost: asked for, row gone";
const UNFINISHED: &str = "jobs lost: asked for, never finished";
const FOLLOW_ON_UNFINISHED: &str = "follow-on jobs never finished";
const MAIL_TWICE: &str = "receipt mails sent twice";
const MAIL_MISSING: &str = "receipt mails missing";
const NUMBER_TWICE: &str = "receipt numbers used twice";
const NUMBER_SKIPPED: &str = "receipt numbers skipped or below 1";
const MOVED_TWICE: &str = "orders moved paid → receipted twice";
const UNRECEIPTED: &str = "orders left unreceipted";
const CONFLICT: &str = "orders found in neither state";
const ENTRY_MISSING: &str = "ledger transfers missing an entry";
const UNEQUAL_TO_ENTRIES: &str = "ledger totals unequal to their entries";
const UNEQUAL_TO_ASKED: &str = "ledger balances unequal to the transfers asked";
const NOTE_TWICE: &str = "notes written twice";
const NOTE_MISSING: &str = "notes missing";
const LINK_TWICE: &str = "chain links recorded twice";
const LINK_MISSING: &str = "chain links missing";
const LINK_ENQUEUED_TWICE: &str = "chain links enqueued twice";
const LINK_BEYOND: &str = "chain links beyond their chain";
const DEAD: &str = "jobs dead-lettered, not parked for an operator";
const CANCELLED: &str = "jobs cancelled (nothing in the run cancels)";
const UNASKED: &str = "jobs nobody asked for (enqueued twice)";
const NOT_ONE_SUCCESSOR: &str = "batches without exactly one successor";
const TOTAL_WRONG: &str = "batch totals wrong or missing";
const TOTAL_TWICE: &str = "batch totals recorded twice";
const TALLY_TWICE: &str = "shop tallies recorded twice";
const TALLY_MISSING: &str = "shop tallies wrong or missing";
const KEYED_TWICE: &str = "keyed calls applied twice at the sink";
const UNKEYED_SILENT: &str = "unkeyed calls applied twice silently";
const NEVER_APPLIED: &str = "remote calls completed, never applied";
const NOT_SURFACED: &str = "unknown outcomes not surfaced";
const STUCK: &str = "intents stuck in progress past their lease";
const STALE: &str = "effects committed under a stale fence";

/// What the checker reads: the producer's log, the sink's copies, the database.
#[derive(Default)]
struct World {
    asked: Vec<Asked>,
    applied: Applied,
    db: Snapshot,
}

impl World {
    /// Adds a completed job whose last claim had `fence`.
    fn job(&mut self, id: i64, fence: i64) -> &mut JobSeen {
        self.db.jobs.entry(id).or_insert(JobSeen {
            state: "completed".into(),
            fence,
            follows_job: None,
            follows_batch: None,
        })
    }

    fn job_mut(&mut self, id: i64) -> &mut JobSeen {
        self.db.jobs.get_mut(&id).expect("a job of the world")
    }

    /// An effect row written by `job`'s completing claim.
    fn by(&self, job: i64, about: (i64, i64), value: i64) -> Effect {
        let fence = self.db.jobs[&job].fence;
        Effect {
            about,
            value,
            job,
            fence,
        }
    }

    fn intent_mut(&mut self, job: i64) -> &mut IntentSeen {
        let intent = self.db.intents.iter_mut().find(|i| i.job == job);
        intent.expect("an intent of the world")
    }

    fn entry_mut(&mut self, key: &str) -> &mut (String, String, i64) {
        let entry = self.db.entries.iter_mut().find(|e| e.0 == key);
        entry.expect("an entry of the world")
    }

    fn balance_mut(&mut self, account: &str) -> &mut i64 {
        self.db.balances.get_mut(account).expect("an account")
    }

    fn findings(&self) -> Findings {
        count(&self.asked, &self.applied, &self.db)
    }

    /// Order 500 asked twice (the repeat finds it receipted and its mail sent), order
    /// 501 once, by a job taken over after its first lease ran out.
    fn mails(&mut self) {
        let asked = [
            (1, MAIL, ORDER, 1),
            (2, REPEAT_MAIL, ORDER, 1),
            (3, OTHER_MAIL, OTHER_ORDER, 2),
        ];
        for (req, job, order, fence) in asked {
            self.asked.push(Asked::Mail { req, job, order });
            self.job(job, fence);
        }
        self.db.attempts.push((OTHER_MAIL, "lease_expired".into()));
        for (job, order, outcome) in [
            (MAIL, ORDER, "changed"),
            (REPEAT_MAIL, ORDER, "already_there"),
            (OTHER_MAIL, OTHER_ORDER, "changed"),
        ] {
            let row = self.by(job, (order, 0), 0);
            self.db.moves.push((row, outcome.into()));
        }
        self.db.outbox = vec![
            self.by(MAIL, (ORDER, 0), 1),
            self.by(OTHER_MAIL, (OTHER_ORDER, 0), 2),
        ];
        for order in [ORDER, OTHER_ORDER] {
            self.db.orders.insert(order, "receipted".into());
        }
    }

    /// Transfer 7 asked twice, transfer 8 once; each posted once, both sides.
    fn transfers(&mut self) {
        let (seven, eight) = ((7, "acct-a", "acct-b", 5), (8, "acct-b", "acct-c", 2));
        for (req, job, (id, from, to, amount)) in
            [(4, 104, seven), (5, 105, seven), (6, 106, eight)]
        {
            let (from, to) = (from.to_owned(), to.to_owned());
            self.asked.push(Asked::Transfer {
                req,
                job,
                id,
                from,
                to,
                amount,
            });
            self.job(job, 1);
        }
        for (id, from, to, amount) in [seven, eight] {
            let entries = &mut self.db.entries;
            entries.push((format!("transfer:{id}:debit"), from.into(), -amount));
            entries.push((format!("transfer:{id}:credit"), to.into(), amount));
            *self.db.balances.entry(from.into()).or_default() -= amount;
            *self.db.balances.entry(to.into()).or_default() += amount;
        }
    }

    fn note_and_ping(&mut self) {
        self.asked.push(Asked::Note { req: 7, job: NOTE });
        self.job(NOTE, 1);
        self.db.notes.push(self.by(NOTE, (NOTE, 0), 0));
        self.asked.push(Asked::Ping { req: 8, job: PING });
        self.job(PING, 1);
    }

    /// A keyed and an unkeyed call, each applied once; the unkeyed one's job and intent
    /// were taken over once.
    fn calls(&mut self) {
        for (req, job, keyed, attempt) in [
            (KEYED_REQ, KEYED, true, 1),
            (UNKEYED_REQ, UNKEYED, false, 2),
        ] {
            self.asked.push(Asked::Call { req, job, keyed });
            self.job(job, attempt);
            self.db.intents.push(IntentSeen {
                state: "completed".into(),
                attempt,
                job,
                expired: false,
            });
        }
        self.applied.keyed.insert(KEYED_REQ, 1);
        self.applied.unkeyed.insert(UNKEYED_REQ, 1);
    }

    /// A chain of 3 links: the producer's first, each later one enqueued by the one
    /// before, each step recorded once.
    fn chain(&mut self) {
        self.asked.push(Asked::Chain {
            req: 11,
            job: LINK_0,
            chain: CHAIN,
            links: 3,
        });
        self.job(LINK_0, 1);
        self.job(LINK_1, 1).follows_job = Some(LINK_0);
        self.job(LINK_2, 1).follows_job = Some(LINK_1);
        for (step, job) in [(0, LINK_0), (1, LINK_1), (2, LINK_2)] {
            self.db.links.push(self.by(job, (CHAIN, step), 0));
        }
    }

    /// A batch of 2 shops' tallies (30 and 12) and its successor's total.
    fn batch(&mut self) {
        let children = vec![(CHILD_1, 1, 30), (CHILD_2, 2, 12)];
        for &(job, shop, amount) in &children {
            self.job(job, 1);
            self.db.tallies.push(self.by(job, (BATCH, shop), amount));
        }
        self.asked.push(Asked::Batch {
            req: 12,
            batch: BATCH,
            children,
        });
        self.db.batches.push(BATCH);
        self.job(SUCCESSOR, 1).follows_batch = Some(BATCH);
        self.db.totals.push(self.by(SUCCESSOR, (BATCH, 0), 42));
    }
}

/// The consistent world.
fn world() -> World {
    let mut w = World::default();
    w.mails();
    w.transfers();
    w.note_and_ping();
    w.calls();
    w.chain();
    w.batch();
    w
}

fn value(counts: &[Count], label: &str) -> i64 {
    let found = counts.iter().find(|c| c.label == label);
    found.unwrap_or_else(|| panic!("no count {label:?}")).value
}

/// The safety counts that are not 0, by label.
fn raised(f: &Findings) -> BTreeMap<&'static str, i64> {
    let raised = f.safety.iter().filter(|c| c.value != 0);
    raised.map(|c| (c.label, c.value)).collect()
}

fn safety_labels() -> BTreeSet<&'static str> {
    world().findings().safety.iter().map(|c| c.label).collect()
}

/// One way the world can go wrong, and the safety counts it must raise.
struct Fault {
    what: &'static str,
    apply: fn(&mut World),
    raises: &'static [(&'static str, i64)],
}

/// Applies each fault to a fresh world and compares every safety count.
fn assert_raised(faults: &[Fault]) {
    let labels = safety_labels();
    for fault in faults {
        for (label, _) in fault.raises {
            assert!(labels.contains(label), "{}: no count {label:?}", fault.what);
        }
        let mut w = world();
        (fault.apply)(&mut w);
        let want: BTreeMap<&str, i64> = fault.raises.iter().copied().collect();
        assert_eq!(raised(&w.findings()), want, "{}", fault.what);
    }
}

fn job_faults() -> Vec<Fault> {
    vec![
        Fault {
            what: "a producer's job row removed",
            apply: |w| {
                w.db.jobs.remove(&PING);
            },
            raises: &[(VANISHED, 1)],
        },
        Fault {
            what: "a producer's job left running",
            apply: |w| w.job_mut(PING).state = "running".into(),
            raises: &[(UNFINISHED, 1)],
        },
        Fault {
            what: "a producer's job dead-lettered",
            apply: |w| w.job_mut(PING).state = "dead".into(),
            raises: &[(DEAD, 1)],
        },
        Fault {
            what: "a producer's job cancelled",
            apply: |w| w.job_mut(PING).state = "cancelled".into(),
            raises: &[(CANCELLED, 1)],
        },
        Fault {
            what: "a job enqueued that nobody asked for (a retried enqueue not deduplicated)",
            apply: |w| {
                w.job(PING + 1000, 1);
            },
            raises: &[(UNASKED, 1)],
        },
        Fault {
            // A link that never ran recorded no step: the two counts go together.
            what: "a chain's last link left available, its step never recorded",
            apply: |w| {
                w.job_mut(LINK_2).state = "available".into();
                w.db.links.retain(|e| e.about != (CHAIN, 2));
            },
            raises: &[(FOLLOW_ON_UNFINISHED, 1), (LINK_MISSING, 1)],
        },
        Fault {
            // A successor that never ran recorded no total: the two counts go together.
            what: "a batch's successor left retryable, its total never recorded",
            apply: |w| {
                w.job_mut(SUCCESSOR).state = "retryable".into();
                w.db.totals.clear();
            },
            raises: &[(FOLLOW_ON_UNFINISHED, 1), (TOTAL_WRONG, 1)],
        },
    ]
}

fn mail_faults() -> Vec<Fault> {
    vec![
        Fault {
            what: "the repeated request mailed its order again, with the next number",
            apply: |w| w.db.outbox.push(w.by(REPEAT_MAIL, (ORDER, 0), 3)),
            raises: &[(MAIL_TWICE, 1)],
        },
        Fault {
            what: "an order's mail missing (the highest number, so no gap)",
            apply: |w| w.db.outbox.retain(|e| e.about.0 != OTHER_ORDER),
            raises: &[(MAIL_MISSING, 1)],
        },
        Fault {
            what: "two orders mailed with one receipt number",
            apply: |w| w.db.outbox[1].value = 1,
            raises: &[(NUMBER_TWICE, 1)],
        },
        Fault {
            what: "a receipt number skipped",
            apply: |w| w.db.outbox[1].value = 3,
            raises: &[(NUMBER_SKIPPED, 1)],
        },
        Fault {
            what: "the repeated request moved the order paid → receipted again",
            apply: |w| w.db.moves[1].1 = "changed".into(),
            raises: &[(MOVED_TWICE, 1)],
        },
        Fault {
            what: "an order left paid",
            apply: |w| {
                w.db.orders.insert(OTHER_ORDER, "paid".into());
            },
            raises: &[(UNRECEIPTED, 1)],
        },
        Fault {
            what: "a move that found the order in neither state",
            apply: |w| w.db.moves[1].1 = "conflict".into(),
            raises: &[(CONFLICT, 1)],
        },
    ]
}

fn ledger_faults() -> Vec<Fault> {
    vec![
        Fault {
            // A balance that agrees with its entries then disagrees with the asked.
            what: "a transfer's credit entry missing, the balance summing what is there",
            apply: |w| {
                w.db.entries.retain(|e| e.0 != "transfer:7:credit");
                *w.balance_mut("acct-b") -= 5;
            },
            raises: &[(ENTRY_MISSING, 1), (UNEQUAL_TO_ASKED, 1)],
        },
        Fault {
            what: "an entry's amount off, the balance as asked",
            apply: |w| w.entry_mut("transfer:7:credit").2 = 6,
            raises: &[(UNEQUAL_TO_ENTRIES, 1)],
        },
        Fault {
            // The entries are as asked: a balance off from them is off from the asked.
            what: "a balance off from its entries",
            apply: |w| *w.balance_mut("acct-b") += 1,
            raises: &[(UNEQUAL_TO_ENTRIES, 1), (UNEQUAL_TO_ASKED, 1)],
        },
        Fault {
            what: "an entry and its balance off together from the transfer asked",
            apply: |w| {
                w.entry_mut("transfer:7:debit").2 = -6;
                *w.balance_mut("acct-a") -= 1;
            },
            raises: &[(UNEQUAL_TO_ASKED, 1)],
        },
    ]
}

fn note_and_chain_faults() -> Vec<Fault> {
    vec![
        Fault {
            what: "a note written twice",
            apply: |w| w.db.notes.push(w.by(NOTE, (NOTE, 0), 0)),
            raises: &[(NOTE_TWICE, 1)],
        },
        Fault {
            what: "a completed note job's note missing",
            apply: |w| w.db.notes.clear(),
            raises: &[(NOTE_MISSING, 1)],
        },
        Fault {
            what: "a chain's step recorded twice",
            apply: |w| w.db.links.push(w.by(LINK_1, (CHAIN, 1), 0)),
            raises: &[(LINK_TWICE, 1)],
        },
        Fault {
            what: "a chain's step missing",
            apply: |w| w.db.links.retain(|e| e.about != (CHAIN, 1)),
            raises: &[(LINK_MISSING, 1)],
        },
        Fault {
            what: "a link that enqueued two successors (the second found its step recorded)",
            apply: |w| w.job(LINK_2 + 100, 1).follows_job = Some(LINK_1),
            raises: &[(LINK_ENQUEUED_TWICE, 1)],
        },
        Fault {
            what: "a step recorded beyond the chain's length",
            apply: |w| w.db.links.push(w.by(LINK_2, (CHAIN, 3), 0)),
            raises: &[(LINK_BEYOND, 1)],
        },
    ]
}

fn batch_faults() -> Vec<Fault> {
    vec![
        Fault {
            // A successor that was never enqueued recorded no total either.
            what: "a batch with no successor",
            apply: |w| {
                w.db.jobs.remove(&SUCCESSOR);
                w.db.totals.clear();
            },
            raises: &[(NOT_ONE_SUCCESSOR, 1), (TOTAL_WRONG, 1)],
        },
        Fault {
            what: "a batch with two successors (the second found the total recorded)",
            apply: |w| w.job(SUCCESSOR + 1, 1).follows_batch = Some(BATCH),
            raises: &[(NOT_ONE_SUCCESSOR, 1)],
        },
        Fault {
            what: "a batch's total wrong",
            apply: |w| w.db.totals[0].value = 41,
            raises: &[(TOTAL_WRONG, 1)],
        },
        Fault {
            what: "a batch's total recorded twice",
            apply: |w| w.db.totals.push(w.by(SUCCESSOR, (BATCH, 0), 42)),
            raises: &[(TOTAL_TWICE, 1)],
        },
        Fault {
            what: "a shop's tally recorded twice",
            apply: |w| w.db.tallies.push(w.by(CHILD_1, (BATCH, 1), 30)),
            raises: &[(TALLY_TWICE, 1)],
        },
        Fault {
            what: "a shop's tally missing",
            apply: |w| w.db.tallies.retain(|e| e.about != (BATCH, 2)),
            raises: &[(TALLY_MISSING, 1)],
        },
        Fault {
            what: "a shop's tally with another amount than the one asked",
            apply: |w| w.db.tallies[0].value += 1,
            raises: &[(TALLY_MISSING, 1)],
        },
        Fault {
            what: "a second batch total, wrong",
            apply: |w| w.db.totals.push(w.by(SUCCESSOR, (BATCH, 0), 41)),
            raises: &[(TOTAL_TWICE, 1), (TOTAL_WRONG, 1)],
        },
        Fault {
            what: "an asked batch whose row and successor are gone",
            apply: |w| {
                w.db.batches.clear();
                w.db.jobs.remove(&SUCCESSOR);
                w.db.totals.clear();
            },
            raises: &[(NOT_ONE_SUCCESSOR, 1), (TOTAL_WRONG, 1)],
        },
    ]
}

fn call_faults() -> Vec<Fault> {
    vec![
        Fault {
            what: "a keyed call applied twice",
            apply: |w| {
                w.applied.keyed.insert(KEYED_REQ, 2);
            },
            raises: &[(KEYED_TWICE, 1)],
        },
        Fault {
            what: "an unkeyed call applied twice, its intent completed",
            apply: |w| {
                w.applied.unkeyed.insert(UNKEYED_REQ, 2);
            },
            raises: &[(UNKEYED_SILENT, 1)],
        },
        Fault {
            what: "a completed call the sink never applied",
            apply: |w| {
                w.applied.keyed.remove(&KEYED_REQ);
            },
            raises: &[(NEVER_APPLIED, 1)],
        },
        Fault {
            what: "an intent left unknown",
            apply: |w| w.intent_mut(UNKEYED).state = "unknown".into(),
            raises: &[(NOT_SURFACED, 1)],
        },
        Fault {
            what: "an applied call whose intent says failed",
            apply: |w| w.intent_mut(KEYED).state = "failed".into(),
            raises: &[(NOT_SURFACED, 1)],
        },
        Fault {
            what: "an applied call whose intent says released",
            apply: |w| w.intent_mut(UNKEYED).state = "released".into(),
            raises: &[(NOT_SURFACED, 1)],
        },
        Fault {
            what: "an intent in progress past its lease",
            apply: |w| {
                let intent = w.intent_mut(KEYED);
                (intent.state, intent.expired) = ("in_progress".into(), true);
            },
            raises: &[(STUCK, 1)],
        },
    ]
}

fn fence_faults() -> Vec<Fault> {
    vec![
        Fault {
            what: "a note written by a claim before the one that completed its job",
            apply: |w| w.db.notes[0].fence -= 1,
            raises: &[(STALE, 1)],
        },
        Fault {
            what: "a move written by the claim whose lease ran out",
            apply: |w| w.db.moves[2].0.fence = 1,
            raises: &[(STALE, 1)],
        },
        Fault {
            what: "a mail written by the claim whose lease ran out",
            apply: |w| w.db.outbox[1].fence = 1,
            raises: &[(STALE, 1)],
        },
    ]
}

#[test]
fn a_consistent_world_is_safe() {
    let f = world().findings();
    assert!(f.safe(), "{:?}", raised(&f));
    assert_eq!(f.safety.len(), 33);
    let seen = [
        ("jobs asked for by the producer", 13),
        ("  completed", 13),
        ("  dead-lettered", 0),
        ("follow-on jobs (chain links, batch successors)", 3),
        ("receipt mails asked for (requests / orders)", 3),
        ("  distinct orders", 2),
        ("ledger transfers asked for (requests)", 3),
        ("  distinct transfers", 2),
        ("notes asked for (fenced, no effect key)", 1),
        ("pings asked for (batched completion)", 1),
        ("chains asked for", 1),
        ("batches asked for", 1),
        ("keyed remote calls asked for", 1),
        ("unkeyed remote calls asked for", 1),
        ("  extra copies the unkeyed sink applied", 0),
    ];
    for (label, want) in seen {
        assert_eq!(value(&f.seen, label), want, "{label}");
    }
    assert_eq!((f.rescues, f.intent_takeovers), (1, 1));
}

#[test]
fn lost_and_unfinished_jobs_are_counted() {
    assert_raised(&job_faults());
}

#[test]
fn mail_faults_are_counted() {
    assert_raised(&mail_faults());
}

#[test]
fn ledger_faults_are_counted() {
    assert_raised(&ledger_faults());
}

#[test]
fn note_and_chain_faults_are_counted() {
    assert_raised(&note_and_chain_faults());
}

#[test]
fn batch_faults_are_counted() {
    assert_raised(&batch_faults());
}

#[test]
fn remote_call_faults_are_counted() {
    assert_raised(&call_faults());
}

#[test]
fn effects_under_a_stale_fence_are_counted() {
    assert_raised(&fence_faults());
}

#[test]
fn surfaced_or_pending_outcomes_are_no_violation() {
    let mut w = world();
    w.applied.unkeyed.insert(UNKEYED_REQ, 2);
    w.intent_mut(UNKEYED).state = "duplicate".into();
    w.intent_mut(KEYED).state = "manual".into();
    let f = w.findings();
    assert!(f.safe(), "{:?}", raised(&f));
    assert_eq!(
        value(&f.seen, "  calls applied twice, marked duplicate or manual"),
        1
    );
    let mut w = world();
    w.applied.unkeyed.insert(UNKEYED_REQ, 2);
    w.intent_mut(UNKEYED).state = "manual".into();
    let f = w.findings();
    assert!(
        f.safe(),
        "parked for an operator is in sight: {:?}",
        raised(&f)
    );
    let mut w = world();
    w.applied.unkeyed.insert(UNKEYED_REQ, 2);
    w.intent_mut(UNKEYED).state = "duplicate".into();
    w.intent_mut(KEYED).state = "manual".into();
    let f = w.findings();
    assert_eq!(value(&f.seen, "  extra copies the unkeyed sink applied"), 1);
    assert_eq!(
        value(&f.seen, "  unknown outcomes parked for an operator"),
        1
    );
    let mut w = world();
    w.job_mut(UNKEYED).state = "dead".into();
    w.intent_mut(UNKEYED).state = "manual".into();
    let f = w.findings();
    assert!(
        !raised(&f).contains_key(DEAD),
        "a dead job whose call is parked for an operator is in sight: {:?}",
        raised(&f)
    );
    let mut w = world();
    w.intent_mut(KEYED).state = "in_progress".into();
    assert!(
        w.findings().safe(),
        "an intent whose holder still has its lease"
    );
}

#[test]
fn every_safety_count_is_raised_by_some_fault() {
    let faults = [
        job_faults(),
        mail_faults(),
        ledger_faults(),
        note_and_chain_faults(),
        batch_faults(),
        call_faults(),
        fence_faults(),
    ];
    let covered: BTreeSet<&str> = faults
        .iter()
        .flatten()
        .flat_map(|f| f.raises.iter().map(|(label, _)| *label))
        .collect();
    assert_eq!(safety_labels(), covered);
}
