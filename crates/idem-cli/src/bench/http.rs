//! The `http` scenario of `idem bench`: the HTTP API of `idem serve`, served in this
//! process on a loopback port, beside the library path on the same store in the same run.
//!
//! - Enqueue, one job per request from `HTTP_CLIENTS` clients at once, with an
//!   Idempotency-Key and without one, each against `Idem::enqueue` at the same
//!   concurrency (the ceiling): the difference between the keyed and the unkeyed rate is
//!   the layer's cost (a reservation before the handler and the stored answer after it).
//! - Claim and complete: `HTTP_CLIENTS` workers claiming `HTTP_CLAIM` jobs per request
//!   and completing each with its fence, against the same loop through
//!   `WorkerProtocol` without HTTP (the ceiling).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use idem::{Idem, Job, ProtocolClaim, WorkerConfig, WorkerProtocol};
use idem_http::Principal;
use idem_http::api::{Api, Limits};
use idem_http::auth::{Auth, Tokens};
use idem_http::idempotency::IdempotencyConfig;
use idem_store::LeaseToken;
use serde_json::{Value, json};

use super::scenarios::{figure, per_second, seed};
use super::{BenchArgs, Figure, Scenario};
use crate::scratch::Scratch;

/// Requests in flight at once (and library calls at once, for the ceiling).
const HTTP_CLIENTS: usize = 8;
/// Jobs per claim request.
const HTTP_CLAIM: u32 = 10;
const TOKEN: &str = "bench-token-0123456789abcdef";
const KIND: &str = "bench";

/// Runs the scenario.
pub async fn run(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let protocol = WorkerProtocol::new(db.idem.clone(), WorkerConfig::default())?;
    let base = serve(&db.idem, protocol.clone()).await?;
    let http = client()?;
    let n = args.single_jobs;
    let library = enqueue_library(&db.idem, n).await?;
    let unkeyed = enqueue_http(&http, &base, n, false).await?;
    let keyed = enqueue_http(&http, &base, n, true).await?;
    let mut out = Vec::new();
    for (metric, value, note) in [
        (
            "enqueue over HTTP with Idempotency-Key",
            keyed,
            "reserve + enqueue + stored answer",
        ),
        ("enqueue over HTTP without a key", unkeyed, "enqueue only"),
    ] {
        let mut f = figure(Scenario::Http, metric, value, "jobs/s");
        f.ceiling = Some(library);
        f.note = format!(
            "{n} requests, {HTTP_CLIENTS} at once, one job each ({note}); ceiling: \
             Idem::enqueue at the same concurrency; keyed/unkeyed {:.2}",
            keyed / unkeyed.max(1e-9)
        );
        out.push(f);
    }
    let jobs = args.jobs;
    seed(db.idem.store().as_ref(), "http-direct", jobs).await?;
    let direct = drain_direct(&protocol, jobs).await?;
    seed(db.idem.store().as_ref(), "http-api", jobs).await?;
    let over_http = drain_http(&http, &base, jobs).await?;
    let note = format!(
        "{jobs} jobs, {HTTP_CLIENTS} workers claiming {HTTP_CLAIM} per request, one complete \
         request per job; ceiling: the same loop through WorkerProtocol without HTTP"
    );
    let metric = "claim + complete over HTTP";
    let f = figure(Scenario::Http, metric, over_http, "jobs/s")
        .beside(direct)
        .noted(note);
    out.push(f);
    Ok(out)
}

/// The API on a loopback port; its base URL.
async fn serve(idem: &Idem, protocol: WorkerProtocol) -> anyhow::Result<String> {
    let mut tokens = Tokens::new();
    tokens
        .add(Principal::operator("bench"), TOKEN)
        .map_err(anyhow::Error::msg)?;
    let api = Api {
        idem: idem.clone(),
        protocol,
        auth: Auth::Tokens(Arc::new(tokens)),
        idempotency: IdempotencyConfig::default(),
        limits: Limits::default(),
        reconciler: None,
    };
    let router = api.router()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(base)
}

fn client() -> anyhow::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(reqwest::Client::builder().no_proxy().build()?)
}

async fn enqueue_library(idem: &Idem, n: usize) -> anyhow::Result<f64> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let clients = (0..HTTP_CLIENTS).map(|_| async {
        while next.fetch_add(1, Ordering::Relaxed) < n {
            idem.enqueue(Job::new(KIND, json!({})).queue("http-library"))
                .await?;
        }
        anyhow::Ok(())
    });
    for r in futures::future::join_all(clients).await {
        r?;
    }
    Ok(per_second(n, started.elapsed()))
}

async fn enqueue_http(
    http: &reqwest::Client,
    base: &str,
    n: usize,
    keyed: bool,
) -> anyhow::Result<f64> {
    let next = AtomicUsize::new(0);
    let queue = if keyed { "http-keyed" } else { "http-unkeyed" };
    let started = Instant::now();
    let clients = (0..HTTP_CLIENTS).map(|_| async {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return anyhow::Ok(());
            }
            let mut req = http
                .post(format!("{base}/v1/jobs"))
                .bearer_auth(TOKEN)
                .json(&json!({"kind": KIND, "queue": queue, "args": {"i": i}}));
            if keyed {
                req = req.header("idempotency-key", format!("bench-{i}"));
            }
            let status = req.send().await?.status();
            if status.as_u16() != 201 {
                bail!("enqueue over HTTP answered {status}");
            }
        }
    });
    for r in futures::future::join_all(clients).await {
        r?;
    }
    Ok(per_second(n, started.elapsed()))
}

async fn drain_direct(protocol: &WorkerProtocol, jobs: usize) -> anyhow::Result<f64> {
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    let workers = (0..HTTP_CLIENTS).map(|w| {
        let done = &done;
        async move {
            while done.load(Ordering::Relaxed) < jobs {
                let claimed = protocol
                    .claim(ProtocolClaim {
                        queue: "http-direct".into(),
                        kinds: vec![KIND.into()],
                        limit: HTTP_CLAIM,
                        lease_ms: None,
                        worker: format!("direct-{w}"),
                        principal: None,
                    })
                    .await?;
                for job in claimed {
                    protocol.complete(job.lease_token(), None).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        }
    });
    for r in futures::future::join_all(workers).await {
        r?;
    }
    Ok(per_second(jobs, started.elapsed()))
}

async fn drain_http(http: &reqwest::Client, base: &str, jobs: usize) -> anyhow::Result<f64> {
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    let workers = (0..HTTP_CLIENTS).map(|w| {
        let done = &done;
        async move {
            while done.load(Ordering::Relaxed) < jobs {
                let claimed: Value = http
                    .post(format!("{base}/v1/claims"))
                    .bearer_auth(TOKEN)
                    .json(
                        &json!({"queue": "http-api", "kinds": [KIND], "limit": HTTP_CLAIM,
                                  "worker": format!("http-{w}")}),
                    )
                    .send()
                    .await?
                    .json()
                    .await?;
                let list = claimed["jobs"]
                    .as_array()
                    .context("a claim answer without jobs")?;
                for job in list {
                    let lease = LeaseToken {
                        job_id: job["id"].as_i64().context("a job without id")?,
                        fence: job["fence"].as_i64().context("a job without fence")?,
                    };
                    let status = http
                        .post(format!("{base}/v1/jobs/{}/complete", lease.job_id))
                        .bearer_auth(TOKEN)
                        .json(&json!({"fence": lease.fence}))
                        .send()
                        .await?
                        .status();
                    if !status.is_success() {
                        bail!("complete over HTTP answered {status}");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        }
    });
    for r in futures::future::join_all(workers).await {
        r?;
    }
    Ok(per_second(jobs, started.elapsed()))
}
