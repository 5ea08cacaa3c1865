//! `idem serve`: the HTTP API (DESIGN.md section 5) and the web dashboard at `/` on
//! `--listen`, with the built-in job kinds' worker beside it unless `--no-workers`, until
//! SIGTERM or SIGINT.
//!
//! What must stay true: without `--dev` the server refuses to start with no token; with
//! `--dev` it binds loopback only and says loudly that it is unauthenticated; tokens are
//! never printed; a stop signal lets in-flight requests finish before the worker stops.
//! `GET /metrics` (Prometheus) is for operators' tokens unless `--metrics-public`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use idem::WorkerProtocol;
use idem_http::Principal;
use idem_http::api::{Api, Limits};
use idem_http::auth::{Auth, Tokens};
use idem_http::dashboard::Dashboard;
use idem_http::idempotency::IdempotencyConfig;
use idem_http::metrics;
use tokio::sync::watch;

use crate::config::{ApiToken, CliConfig};
use crate::exit::{Exit, OrExit};
use crate::interrupt::Interrupt;
use crate::worker::{self, WorkerArgs};

/// Most connections the default pool adds for the requests handled at once (up to
/// `--max-requests`), still within the worker's cap (`worker::MAX_DEFAULT_POOL`).
pub(crate) const REQUEST_CONNECTIONS: u32 = 64;

/// Arguments of `idem serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(
        long,
        env = "IDEM_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    listen: SocketAddr,
    /// Unauthenticated local use: every request is the operator `dev`; loopback only
    #[arg(long)]
    dev: bool,
    /// Serve the API only: run no worker for the built-in kinds (the rescuer and purger
    /// still run)
    #[arg(long)]
    no_workers: bool,
    /// Requests handled at once; more are answered 503
    #[arg(long, default_value_t = 256, value_name = "N")]
    max_requests: usize,
    /// The longest a request may take
    #[arg(long, default_value = "30s", value_parser = crate::reconcile::duration, value_name = "DUR")]
    request_timeout: Duration,
    /// The largest request body, in bytes
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    max_body: usize,
    /// Serve GET /metrics to anyone who can reach the listener (default: operators'
    /// bearer tokens only)
    #[arg(long)]
    metrics_public: bool,
    #[command(flatten)]
    worker: WorkerArgs,
}

/// `idem serve`.
pub async fn run(url: &str, a: ServeArgs) -> anyhow::Result<ExitCode> {
    let queues = worker::queues(&a.worker)?;
    let config = worker::settings(&a.worker, queues)?;
    let auth = auth(&a, &config)?;
    let limits = Limits::new(a.max_requests, a.request_timeout, a.max_body);
    if a.max_requests == 0 || a.max_body == 0 || a.request_timeout.is_zero() {
        return Err(anyhow!(
            "--max-requests, --max-body and --request-timeout must be above zero"
        ))
        .or_exit(Exit::Usage);
    }
    let idempotency = IdempotencyConfig {
        // A reservation outlives the longest request, so a live one is never taken over.
        lease: a.request_timeout + Duration::from_secs(30),
        retention: config.retention.http_keys,
        max_body: a.max_body,
        ..IdempotencyConfig::default()
    };
    let requests = u32::try_from(a.max_requests)
        .unwrap_or(u32::MAX)
        .min(REQUEST_CONNECTIONS);
    let idem = worker::open(url, &config, requests).await?;
    let protocol = WorkerProtocol::new(idem.clone(), config.worker.clone())?;
    // Without a worker here, the API's own claims still need a rescuer (and a purger).
    let maintenance = a
        .no_workers
        .then(|| protocol.start_maintenance("idem-serve"));
    // The built-in kinds' worker: started unless --no-workers; its reconciler serves
    // POST /v1/reconcile either way.
    let mut builtin = idem.worker(config.worker.clone())?;
    worker::register_builtins(&mut builtin)?;
    worker::register_periodic(&mut builtin, &config)?;
    let reconciler = builtin.reconciler();
    let metrics = match a.metrics_public {
        true => metrics::Access::Public,
        false => metrics::Access::Operators(auth.clone()),
    };
    let dashboard = Dashboard {
        idem: idem.clone(),
        auth: auth.clone(),
        kinds: crate::guarantees::builtin_kinds(),
        limits: limits.clone(),
    };
    let api = Api {
        idem: idem.clone(),
        protocol,
        auth,
        idempotency,
        limits,
        reconciler: Some(reconciler.clone()),
    };
    let exporter = metrics::Exporter::start(&idem).or_exit(Exit::Config)?;
    let router = api
        .router()
        .or_exit(Exit::Config)?
        .merge(dashboard.router())
        .merge(exporter.router(metrics));
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))
        .or_exit(Exit::Unavailable)?;
    let address = listener.local_addr()?;
    let mut interrupt = Interrupt::listen()?;
    let running = (!a.no_workers).then_some(builtin);
    let (stop, stopped) = watch::channel(false);
    let handle = running.map(|w| w.start());
    let passes = (handle.is_some() && !a.worker.reconcile_every.is_zero())
        .then_some(reconciler)
        .map(|r| {
            tokio::spawn(worker::reconcile_every(
                r,
                a.worker.reconcile_every,
                stopped.clone(),
            ))
        });
    let mut shutdown = stopped.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = shutdown.wait_for(|s| *s).await;
    });
    let server = tokio::spawn(server.into_future());
    if a.dev {
        eprintln!(
            "WARNING: idem serve --dev: NO AUTHENTICATION. Every request acts as the operator \
             `dev`. For local use only; listening on loopback {address}."
        );
    }
    println!(
        "idem serve: listening on http://{address} ({}), workers {}, database {}; stop with \
         SIGTERM or Ctrl-C",
        match a.dev {
            true => "dev mode, unauthenticated".to_string(),
            false => "bearer tokens".to_string(),
        },
        match &handle {
            Some(_) => "for the built-in kinds",
            None => "off (--no-workers; expired leases are still rescued)",
        },
        idem_postgres::redact(url)
    );
    let forever = std::future::pending::<std::convert::Infallible>();
    let signal = match interrupt.run(forever).await {
        Ok(never) => match never {},
        Err(signal) => signal,
    };
    eprintln!("idem serve: {signal}: stopping; requests in flight finish first");
    let _ = stop.send(true);
    // In-flight requests finish first; then the worker gets its shutdown timeout.
    let served = server.await;
    let report = match handle {
        Some(h) => Some(h.shutdown().await),
        None => None,
    };
    if let Some(passes) = passes {
        let _ = passes.await;
    }
    exporter.stop().await;
    if let Some((stop, tasks)) = maintenance {
        let _ = stop.send(true);
        for task in tasks {
            let _ = task.await;
        }
    }
    match served {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("the server stopped with an error: {e}"),
        Err(e) => eprintln!("the server task failed: {e}"),
    }
    match report {
        Some(r) => println!(
            "idem serve stopped by {signal}: worker {}",
            worker::summary(&r)
        ),
        None => println!("idem serve stopped by {signal}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// How requests authenticate: `--dev` (loopback only), or the tokens of the config file
/// and of `IDEM_API_TOKENS`; none at all is refused.
fn auth(a: &ServeArgs, config: &CliConfig) -> anyhow::Result<Auth> {
    if a.dev {
        if !a.listen.ip().is_loopback() {
            return Err(anyhow!(
                "--dev serves without authentication, so it listens on loopback only; use \
                 --listen 127.0.0.1:PORT, or configure tokens and drop --dev"
            ))
            .or_exit(Exit::Usage);
        }
        return Ok(Auth::Dev);
    }
    let mut tokens = Tokens::new();
    for entry in &config.api_tokens {
        let token = file_token(entry).or_exit(Exit::Config)?;
        tokens
            .add(principal(&entry.principal, entry.operator), &token)
            .map_err(|e| anyhow!("[[api.tokens]]: {e}"))
            .or_exit(Exit::Config)?;
    }
    let operators: Vec<String> = std::env::var("IDEM_API_OPERATORS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if let Ok(list) = std::env::var("IDEM_API_TOKENS") {
        for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, token)) = pair.split_once('=') else {
                return Err(anyhow!(
                    "IDEM_API_TOKENS holds an entry without `=`; write principal=token pairs \
                     separated by commas"
                ))
                .or_exit(Exit::Config);
            };
            let operator = operators.iter().any(|o| o == name);
            tokens
                .add(principal(name, operator), token)
                .map_err(|e| anyhow!("IDEM_API_TOKENS: {e}"))
                .or_exit(Exit::Config)?;
        }
    }
    if tokens.is_empty() {
        return Err(anyhow!(
            "idem serve has no tokens: add [[api.tokens]] entries (principal, token_env, \
             operator) to the config file or set IDEM_API_TOKENS=principal=token,…; or use \
             --dev for unauthenticated local use"
        ))
        .or_exit(Exit::Config);
    }
    Ok(Auth::Tokens(Arc::new(tokens)))
}

fn principal(name: &str, operator: bool) -> Principal {
    match operator {
        true => Principal::operator(name),
        false => Principal::client(name),
    }
}

fn file_token(entry: &ApiToken) -> anyhow::Result<String> {
    match (&entry.token, &entry.token_env) {
        (Some(t), None) => Ok(t.clone()),
        (None, Some(var)) => std::env::var(var).map_err(|_| {
            anyhow!(
                "[[api.tokens]] principal {:?}: the environment variable {var} is not set",
                entry.principal
            )
        }),
        _ => Err(anyhow!(
            "[[api.tokens]] principal {:?}: give exactly one of token and token_env",
            entry.principal
        )),
    }
}
