//! The producer: plans the run's requests, creates its batches first, then enqueues the
//! rest in small chunks spread over the run, logging each committed chunk to the
//! producer's log ([`super::asked`]).
//!
//! Every request is enqueued with the enqueue key `req-{n}`, so a chunk retried after an
//! error whose commit may or may not have happened (a server restart, a killed
//! connection) enqueues nothing twice and logs the job that holds the key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use idem::{Batch, Idem, Job};

use super::QUEUE;
use super::asked::{Asked, AskedLog};
use super::workload::flow::Link;

/// Links per chain.
const LINKS: i64 = 3;
/// Children per batch, and one batch per this many jobs.
const CHILDREN: usize = 20;
const JOBS_PER_BATCH: usize = 1000;
/// Jobs per enqueue transaction (at most).
const CHUNK: usize = 50;
/// How often a failed chunk is tried again, and how long apart.
const TRIES: u32 = 40;
const PAUSE: Duration = Duration::from_millis(250);

/// One planned request, before it has a job.
#[derive(Clone)]
enum Plan {
    Mail {
        order: i64,
    },
    Transfer {
        id: i64,
        from: String,
        to: String,
        amount: i64,
    },
    Note,
    Ping,
    Call {
        keyed: bool,
    },
    Chain {
        chain: i64,
    },
}

/// The run's requests: `jobs` jobs enqueued by the producer (batches' children among
/// them), in a fixed mix of every effect class. One mail and one transfer in 25 repeats
/// the previous one's order or transfer, as a client that sent its request twice.
pub(super) struct Requests {
    batches: usize,
    singles: Vec<Plan>,
}

impl Requests {
    pub(super) fn plan(jobs: usize) -> Requests {
        let batches = (jobs / JOBS_PER_BATCH).max(usize::from(jobs >= 2 * CHILDREN));
        let (mut mails, mut transfers, mut chains) = (0i64, 0i64, 0i64);
        let repeat = |n: i64| if n % 25 == 24 { n - 1 } else { n };
        let singles = (0..jobs - batches * CHILDREN)
            .map(|i| match i % 20 {
                6..=9 => {
                    transfers += 1;
                    let id = repeat(transfers);
                    let from = id % 10;
                    Plan::Transfer {
                        id,
                        from: format!("acct-{from}"),
                        to: format!("acct-{}", (from + 1 + id % 9) % 10),
                        amount: 1 + id % 97,
                    }
                }
                10 | 11 => Plan::Note,
                12 | 13 => Plan::Ping,
                14 | 15 => Plan::Call {
                    keyed: i % 20 == 14,
                },
                16 => {
                    chains += 1;
                    Plan::Chain { chain: chains }
                }
                _ => {
                    mails += 1;
                    Plan::Mail {
                        order: repeat(mails),
                    }
                }
            })
            .collect();
        Requests { batches, singles }
    }

    /// Every job the run will hold once it is done: the producer's, the chains' later
    /// links and the batches' successors.
    pub(super) fn expected_jobs(&self) -> usize {
        let chains = self
            .singles
            .iter()
            .filter(|p| matches!(p, Plan::Chain { .. }))
            .count();
        self.singles.len() + chains * (LINKS as usize - 1) + self.batches * (CHILDREN + 1)
    }
}

/// Where the producer stands, for the driver.
#[derive(Default)]
pub(super) struct Produced {
    /// Requests logged so far.
    pub(super) asked: AtomicUsize,
    /// Set once every request is logged.
    pub(super) done: AtomicBool,
}

/// The sink's two endpoints.
pub(super) struct Urls {
    pub(super) keyed: String,
    pub(super) unkeyed: String,
}

/// Creates the batches, then enqueues the single requests over `spread`.
pub(super) async fn produce(
    idem: Idem,
    requests: Requests,
    urls: Urls,
    mut log: AskedLog,
    spread: Duration,
    produced: Arc<Produced>,
) -> anyhow::Result<()> {
    let mut req = 0u64;
    for b in 0..requests.batches {
        req += 1;
        let asked = batch(&idem, req, b as i64).await?;
        log.append(&[asked])?;
        produced.asked.fetch_add(1, Ordering::SeqCst);
    }
    let chunks: Vec<_> = requests.singles.chunks(CHUNK).collect();
    let every = spread / u32::try_from(chunks.len().max(1)).unwrap_or(u32::MAX);
    let started = Instant::now();
    for (n, chunk) in chunks.into_iter().enumerate() {
        let due = started + every * u32::try_from(n).unwrap_or(u32::MAX);
        tokio::time::sleep_until(due.into()).await;
        let first = req + 1;
        req += chunk.len() as u64;
        let asked = enqueue_retrying(&idem, first, chunk, &urls).await?;
        log.append(&asked)?;
        produced.asked.fetch_add(asked.len(), Ordering::SeqCst);
    }
    produced.done.store(true, Ordering::SeqCst);
    Ok(())
}

/// One batch of shop tallies whose successor totals their results.
async fn batch(idem: &Idem, req: u64, b: i64) -> anyhow::Result<Asked> {
    let amounts: Vec<(i64, i64)> = (0..CHILDREN as i64)
        .map(|shop| (shop, 1 + (b * 31 + shop * 7) % 13))
        .collect();
    let tally = |&(shop, amount): &(i64, i64)| {
        let args = serde_json::json!({"shop": shop, "amount": amount});
        Job::new("shop-tally", args).queue(QUEUE)
    };
    let total = Job::new("batch-total", serde_json::json!({})).queue(QUEUE);
    let created = idem
        .batch(Batch::new(total).children(amounts.iter().map(tally)))
        .await
        .context("cannot create a batch")?;
    let children = created
        .children
        .iter()
        .zip(&amounts)
        .map(|(c, &(shop, amount))| (c.job.id, shop, amount))
        .collect();
    Ok(Asked::Batch {
        req,
        batch: created.batch.id,
        children,
    })
}

/// Enqueues one chunk, trying again after an error: the enqueue keys make a retry of a
/// chunk that did commit a no-op that answers the jobs it made.
async fn enqueue_retrying(
    idem: &Idem,
    first: u64,
    chunk: &[Plan],
    urls: &Urls,
) -> anyhow::Result<Vec<Asked>> {
    let mut tries = 0;
    loop {
        match enqueue(idem, first, chunk, urls).await {
            Ok(asked) => return Ok(asked),
            Err(e) if tries < TRIES => {
                tries += 1;
                tracing::debug!("enqueue failed, trying again: {e:#}");
                tokio::time::sleep(PAUSE).await;
            }
            Err(e) => return Err(e.context(format!("enqueue failed {TRIES} times"))),
        }
    }
}

/// Enqueues one chunk with its orders marked paid, in one transaction.
async fn enqueue(
    idem: &Idem,
    first: u64,
    chunk: &[Plan],
    urls: &Urls,
) -> anyhow::Result<Vec<Asked>> {
    let jobs = chunk
        .iter()
        .zip(first..)
        .map(|(p, req)| job(p, req, urls).enqueue_key(format!("req-{req}")))
        .collect();
    let mut tx = idem.begin().await?;
    let rows = idem.enqueue_many_tx(&mut tx, jobs).await?;
    for p in chunk {
        if let Plan::Mail { order } = p {
            let sql = "INSERT INTO chaos_order (order_id, status) VALUES ($1, 'paid') \
                       ON CONFLICT (order_id) DO NOTHING";
            tx.execute(sql, &[(*order).into()]).await?;
        }
    }
    tx.commit().await?;
    Ok(chunk
        .iter()
        .zip(first..)
        .zip(rows)
        .map(|((p, req), row)| asked(p, req, row.id))
        .collect())
}

fn job(p: &Plan, req: u64, urls: &Urls) -> Job {
    let (kind, args) = match p {
        Plan::Mail { order } => ("receipt-mail", serde_json::json!({"order": order})),
        Plan::Transfer {
            id,
            from,
            to,
            amount,
        } => (
            "transfer",
            serde_json::json!({"id": id, "from": from, "to": to, "amount": amount}),
        ),
        Plan::Note => ("note", serde_json::json!({})),
        Plan::Ping => ("ping", serde_json::json!({})),
        Plan::Call { keyed } => {
            let url = if *keyed { &urls.keyed } else { &urls.unkeyed };
            let mut args = serde_json::json!({"url": url, "keyed": keyed, "body": {"req": req}});
            if !keyed {
                args["lookup_url"] = url.as_str().into();
            }
            ("http", args)
        }
        Plan::Chain { chain } => {
            let link = Link {
                chain: *chain,
                step: 0,
                links: LINKS,
            };
            ("chain-link", serde_json::json!(link))
        }
    };
    Job::new(kind, args).queue(QUEUE)
}

fn asked(p: &Plan, req: u64, job: i64) -> Asked {
    match p.clone() {
        Plan::Mail { order } => Asked::Mail { req, job, order },
        Plan::Transfer {
            id,
            from,
            to,
            amount,
        } => Asked::Transfer {
            req,
            job,
            id,
            from,
            to,
            amount,
        },
        Plan::Note => Asked::Note { req, job },
        Plan::Ping => Asked::Ping { req, job },
        Plan::Call { keyed } => Asked::Call { req, job, keyed },
        Plan::Chain { chain } => Asked::Chain {
            req,
            job,
            chain,
            links: LINKS,
        },
    }
}
