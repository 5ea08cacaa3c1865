//! The config file (`idem.toml`) and `idem config check`.
//!
//! The file is optional: `--config PATH` (or `IDEM_CONFIG`) names it, else `idem.toml` in
//! the current directory is read if it exists, else the built-in defaults apply. Every
//! key is optional; an unknown key is an error naming it, and a bad duration names its key
//! and value. Durations are written as `30s`, `10m`, `3d`, `1h 30m`.
//!
//! ```toml
//! [retry]
//! ladder = ["5s", "30s", "2m", "10m", "1h", "3h", "6h"]
//! jitter = 0.1
//! max_attempts = 8
//! max_retry_after = "1h"      # a handler's retry_after is clamped to this
//! max_snooze = "1h"           # a handler's snooze is clamped to this
//! max_snoozes = 10            # snoozes a job may take; beyond them, a failed attempt
//! [retry.queues.mail]          # a queue's own ladder; jitter defaults to [retry]'s
//! ladder = ["1s", "10s"]
//! [retry.kinds.receipt-mail]   # a job kind's own ladder
//! ladder = ["2s"]
//! jitter = 0.0
//! [worker]
//! lease = "30s"
//! job_timeout = "60s"
//! rescue_interval = "5s"
//! poll_interval = "500ms"     # claims without a wake-up; enqueues from other processes wake workers
//! pool_size = 40              # PostgreSQL connections of `idem worker` and `idem serve`, all
//!                             # pools; --pool-size overrides it; SQLite ignores it. Default:
//!                             # the jobs at once + 8 and the claim and engine pools' share, at
//!                             # least 25 (serve: + up to 64), at most 60
//! [retention]
//! enqueue_keys = "3d"
//! effect_keys = "3d"
//! intents = "3d"
//! finished_jobs = "3d"
//! dead_jobs = "7d"
//! [[periodic]]                 # a job enqueued at every tick of a cron schedule (UTC)
//! name = "nightly-ping"        # stable: each tick's enqueue key is cron:{name}:{tick}
//! schedule = "0 3 * * *"       # five fields, or six with seconds first
//! kind = "http"
//! queue = "default"            # optional
//! args = { url = "https://example.com/ping" }
//! catch_up = "1m"              # optional: a worker starting this long after a tick enqueues it
//! ```
//!
//! Parsing only checks each value on its own; [`CliConfig::check`] applies the library's
//! rules (ladders, bounds on handler delays, retention windows, the retry horizon), as a
//! worker does at start-up.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use idem::config::{HORIZON_MARGIN, Horizon, Retention, human};
use idem::retry::{DEFAULT_MAX_ATTEMPTS, RetryLadder};
use idem::{IdemError, WorkerConfig};
use serde::Deserialize;

use crate::exit::{Exit, OrExit};
use crate::output::{Format, print_json};

/// The `[[periodic]]` entries, each checked, names unique.
fn periodic(entries: Vec<PeriodicToml>) -> anyhow::Result<Vec<PeriodicToml>> {
    for (i, e) in entries.iter().enumerate() {
        e.build()?;
        if entries[..i].iter().any(|o| o.name == e.name) {
            bail!(
                "[[periodic]] {:?} is named twice; give each schedule its own name",
                e.name
            );
        }
    }
    Ok(entries)
}

/// The file read when no `--config` is given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "idem.toml";

/// The settings of the config file, with defaults filled in: the worker settings that
/// decide the retry horizon, as the `WorkerConfig` a worker would start with, and the
/// retention windows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CliConfig {
    /// The file read; `None` = built-in defaults.
    pub source: Option<PathBuf>,
    /// `[retry]` and `[worker]`: ladders, attempts, bounds on handler delays, lease, job
    /// timeout, rescue interval.
    pub worker: WorkerConfig,
    /// `[worker] pool_size`: the PostgreSQL pool of `idem worker` and `idem serve`;
    /// `None` = sized to the worker's jobs (`worker::pool_size`).
    pub pool_size: Option<NonZeroU32>,
    /// Retention windows.
    pub retention: Retention,
    /// `[[api.tokens]]`: the bearer tokens of `idem serve`, each naming a principal.
    pub api_tokens: Vec<ApiToken>,
    /// `[[periodic]]`: jobs that `idem worker` and `idem serve` enqueue on a schedule.
    pub periodic: Vec<PeriodicToml>,
}

/// One `[[periodic]]` entry, checked when the file is parsed ([`PeriodicToml::build`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodicToml {
    /// The schedule's name, in each tick's enqueue key.
    pub name: String,
    /// The cron schedule (UTC).
    pub schedule: String,
    /// The job's kind.
    pub kind: String,
    /// The job's queue (default `default`).
    pub queue: Option<String>,
    /// The job's args (default `{}`).
    pub args: Option<toml::Value>,
    /// The job's priority.
    pub priority: Option<i16>,
    /// The job's attempts.
    pub max_attempts: Option<i32>,
    /// How far back a starting worker looks for a missed tick (default 1m).
    pub catch_up: Option<String>,
}

impl PeriodicToml {
    /// The schedule, or an error naming the entry and what is wrong.
    pub fn build(&self) -> anyhow::Result<idem::Periodic> {
        let what = format!("[[periodic]] {:?}", self.name);
        let args = match &self.args {
            Some(v) => serde_json::to_value(v).with_context(|| format!("{what}: args"))?,
            None => serde_json::json!({}),
        };
        let mut job = idem::Job::new(self.kind.clone(), args);
        if let Some(q) = &self.queue {
            job = job.queue(q.clone());
        }
        if let Some(p) = self.priority {
            job = job.priority(p);
        }
        if let Some(n) = self.max_attempts {
            job = job.max_attempts(n);
        }
        // Zero is allowed here: no catch-up.
        let catch_up = match &self.catch_up {
            Some(text) => parse_duration(&format!("periodic.{}.catch_up", self.name), text)?,
            None => idem::cron::DEFAULT_CATCH_UP,
        };
        let p = idem::Periodic::new(&self.name, &self.schedule, job).with_context(|| what)?;
        Ok(p.catch_up(catch_up))
    }
}

/// One `[[api.tokens]]` entry: a principal and where its token is. The token itself may
/// be written in the file (`token`) or, better, named by the environment variable that
/// holds it (`token_env`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// The principal the token names.
    pub principal: String,
    /// The token.
    pub token: Option<String>,
    /// The environment variable holding the token.
    pub token_env: Option<String>,
    /// Whether the principal sees and acts on everything.
    #[serde(default)]
    pub operator: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    retry: RetryToml,
    #[serde(default)]
    worker: WorkerToml,
    #[serde(default)]
    retention: RetentionToml,
    #[serde(default)]
    api: ApiToml,
    #[serde(default)]
    periodic: Vec<PeriodicToml>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ApiToml {
    #[serde(default)]
    tokens: Vec<ApiToken>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetryToml {
    ladder: Option<Vec<String>>,
    jitter: Option<f64>,
    max_attempts: Option<i32>,
    max_retry_after: Option<String>,
    max_snooze: Option<String>,
    max_snoozes: Option<i32>,
    #[serde(default)]
    queues: BTreeMap<String, LadderToml>,
    #[serde(default)]
    kinds: BTreeMap<String, LadderToml>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LadderToml {
    ladder: Option<Vec<String>>,
    jitter: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WorkerToml {
    lease: Option<String>,
    job_timeout: Option<String>,
    rescue_interval: Option<String>,
    poll_interval: Option<String>,
    pool_size: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetentionToml {
    enqueue_keys: Option<String>,
    effect_keys: Option<String>,
    intents: Option<String>,
    finished_jobs: Option<String>,
    dead_jobs: Option<String>,
    http_keys: Option<String>,
}

impl CliConfig {
    /// Reads `path`, or `idem.toml` in the current directory if it exists, or returns
    /// the defaults.
    pub fn load(path: Option<&Path>) -> anyhow::Result<CliConfig> {
        let default = Path::new(DEFAULT_CONFIG_FILE);
        let path = match path {
            Some(p) => p,
            None if default.exists() => default,
            None => return Ok(CliConfig::default()),
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the config file {}", path.display()))?;
        let mut config = CliConfig::parse(&text)
            .with_context(|| format!("in the config file {}", path.display()))?;
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// Parses the text of a config file; missing keys take their defaults.
    pub fn parse(text: &str) -> anyhow::Result<CliConfig> {
        let file: FileToml = toml::from_str(text)?;
        let d = CliConfig::default();
        let default_ladder = ladder(
            "retry",
            &file.retry.ladder,
            file.retry.jitter,
            &d.worker.ladder,
        )?;
        let ladders = |section: &str, map: &BTreeMap<String, LadderToml>| {
            map.iter()
                .map(|(name, l)| {
                    let key = format!("retry.{section}.{name}");
                    Ok((
                        name.clone(),
                        ladder(&key, &l.ladder, l.jitter, &default_ladder)?,
                    ))
                })
                .collect::<anyhow::Result<BTreeMap<_, _>>>()
        };
        let (w, r) = (&file.worker, &file.retry);
        let d = &d.worker;
        let lease = duration("worker.lease", &w.lease, d.lease)?;
        let worker = WorkerConfig {
            queue_ladders: ladders("queues", &r.queues)?,
            kind_ladders: ladders("kinds", &r.kinds)?,
            ladder: default_ladder,
            max_attempts: max_attempts(r.max_attempts)?,
            max_retry_after: duration(
                "retry.max_retry_after",
                &r.max_retry_after,
                d.max_retry_after,
            )?,
            max_snooze: duration("retry.max_snooze", &r.max_snooze, d.max_snooze)?,
            max_snoozes: max_snoozes(r.max_snoozes, d.max_snoozes)?,
            job_timeout: duration("worker.job_timeout", &w.job_timeout, d.job_timeout)?,
            rescue_interval: duration(
                "worker.rescue_interval",
                &w.rescue_interval,
                d.rescue_interval,
            )?,
            poll_interval: duration("worker.poll_interval", &w.poll_interval, d.poll_interval)?,
            ..WorkerConfig::default().lease(lease)
        };
        Ok(CliConfig {
            source: None,
            worker,
            pool_size: w
                .pool_size
                .map(|n| pool_size("worker.pool_size", n))
                .transpose()?,
            retention: retention(&file.retention)?,
            api_tokens: file.api.tokens,
            periodic: periodic(file.periodic)?,
        })
    }

    /// The schedules of `[[periodic]]`.
    pub fn schedules(&self) -> anyhow::Result<Vec<idem::Periodic>> {
        self.periodic.iter().map(PeriodicToml::build).collect()
    }

    /// The worst-case retry horizon over every ladder ([`WorkerConfig::horizon`]).
    pub fn horizon(&self) -> Horizon {
        self.worker.horizon()
    }

    /// Applies the checks `Idem::worker` makes at start-up: the worker's settings, the
    /// retention windows among themselves, and the retry horizon they must cover.
    pub fn check(&self) -> Result<(), IdemError> {
        self.worker.validate()?;
        self.retention.validate()?;
        self.retention.check_covers(&self.horizon())
    }

    /// Each ladder with the config section it comes from.
    fn named_ladders(&self) -> Vec<(String, &RetryLadder)> {
        let w = &self.worker;
        let mut all = vec![("retry".to_owned(), &w.ladder)];
        let queues = w
            .queue_ladders
            .iter()
            .map(|(n, l)| (format!("retry.queues.{n}"), l));
        let kinds = w
            .kind_ladders
            .iter()
            .map(|(n, l)| (format!("retry.kinds.{n}"), l));
        all.extend(queues.chain(kinds));
        all
    }
}

/// A ladder from its section; missing rungs and jitter come from `fallback`.
fn ladder(
    key: &str,
    rungs: &Option<Vec<String>>,
    jitter: Option<f64>,
    fallback: &RetryLadder,
) -> anyhow::Result<RetryLadder> {
    let rungs = match rungs {
        None => fallback.rungs.clone(),
        Some(texts) => texts
            .iter()
            .enumerate()
            .map(|(i, t)| parse_duration(&format!("{key}.ladder[{i}]"), t))
            .collect::<anyhow::Result<_>>()?,
    };
    let ladder = RetryLadder::new(rungs).jitter(jitter.unwrap_or(fallback.jitter));
    if let Err(e) = ladder.validate() {
        bail!("{key}: {e}");
    }
    Ok(ladder)
}

fn max_attempts(value: Option<i32>) -> anyhow::Result<i32> {
    match value {
        None => Ok(DEFAULT_MAX_ATTEMPTS),
        Some(n) if n >= 1 => Ok(n),
        Some(n) => bail!("retry.max_attempts is {n}; it must be at least 1"),
    }
}

fn max_snoozes(value: Option<i32>, default: i32) -> anyhow::Result<i32> {
    match value {
        None => Ok(default),
        Some(n) if n >= 0 => Ok(n),
        Some(n) => bail!(
            "retry.max_snoozes is {n}; it must be 0 or more (0: every snooze counts as a \
             failed attempt)"
        ),
    }
}

/// A pool size of `key` (the config key or the flag), which must be 1 or more.
pub(crate) fn pool_size(key: &str, n: u32) -> anyhow::Result<NonZeroU32> {
    NonZeroU32::new(n).ok_or_else(|| {
        anyhow::anyhow!(
            "{key} is 0: a pool needs at least 1 connection (a worker at least {}: {} for its \
             own duties, one for jobs, the rest for claims and the engine); leave it out for a \
             pool sized to the worker's jobs",
            crate::worker::smallest_pool(),
            idem::WORKER_CONNECTIONS
        )
    })
}

fn retention(r: &RetentionToml) -> anyhow::Result<Retention> {
    let d = Retention::default();
    Ok(Retention {
        enqueue_keys: duration("retention.enqueue_keys", &r.enqueue_keys, d.enqueue_keys)?,
        effect_keys: duration("retention.effect_keys", &r.effect_keys, d.effect_keys)?,
        intents: duration("retention.intents", &r.intents, d.intents)?,
        finished_jobs: duration("retention.finished_jobs", &r.finished_jobs, d.finished_jobs)?,
        dead_jobs: duration("retention.dead_jobs", &r.dead_jobs, d.dead_jobs)?,
        http_keys: duration("retention.http_keys", &r.http_keys, d.http_keys)?,
    })
}

/// An optional duration setting, which must be longer than zero.
fn duration(key: &str, text: &Option<String>, default: Duration) -> anyhow::Result<Duration> {
    let Some(text) = text else {
        return Ok(default);
    };
    let d = parse_duration(key, text)?;
    if d.is_zero() {
        bail!("{key} = {text:?}: it must be longer than zero");
    }
    Ok(d)
}

fn parse_duration(key: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text).map_err(|e| {
        anyhow::anyhow!(
            "{key} = {text:?} is not a duration ({e}); write e.g. \"30s\", \"10m\", \"3d\""
        )
    })
}

/// `idem config …`.
#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print the retry ladders, the worker's settings (timing, poll interval, pool size),
    /// every term of the computed retry horizon (ladders, handler delays, snoozes,
    /// attempts) and the retention windows, and check that the windows cover the horizon
    Check(CheckArgs),
}

/// Arguments of `idem config check`.
#[derive(Args)]
pub struct CheckArgs {
    /// Config file [default: ./idem.toml if it exists, else built-in defaults]
    #[arg(long, env = "IDEM_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    format: Format,
}

/// Runs `idem config …`.
pub fn run(cmd: ConfigCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Check(args) => check(args),
    }
}

/// `idem config check`: the report on stdout; a refusal is also the error (stderr, exit
/// 1); a file that does not parse is a bad configuration (exit 5).
fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = CliConfig::load(args.config.as_deref()).or_exit(Exit::Config)?;
    match args.format.json {
        true => print_json(&report_json(&config))?,
        false => print!("{}", report(&config)),
    }
    config.check().or_exit(Exit::Refused)?;
    if !args.format.json {
        println!("\nok: the retention windows cover the retry horizon");
    }
    Ok(ExitCode::SUCCESS)
}

/// The text `idem config check` prints.
fn report(c: &CliConfig) -> String {
    let mut out = String::new();
    let source = match &c.source {
        Some(p) => p.display().to_string(),
        None => "built-in defaults (no idem.toml here)".to_owned(),
    };
    out += &format!("config: {source}\n\n");
    out += &report_ladders(c);
    out += &report_worker(c);
    let h = c.horizon();
    out += &report_horizon(c, &h);
    out += &report_retention(c, &h);
    out += &report_operator_retry(c, &h);
    out
}

fn report_ladders(c: &CliConfig) -> String {
    let w = &c.worker;
    let failures = w.max_attempts - 1;
    let mut out = format!(
        "retry ladders (worst case: the delays after {failures} failed attempt(s), each at its \
         jitter maximum; with handler delays: each at least max_retry_after {})\n",
        human(w.max_retry_after)
    );
    for (key, ladder) in c.named_ladders() {
        let worst = human(ladder.worst_case_total(w.max_attempts));
        let with = human(ladder.worst_case_delays(w.max_attempts, w.max_retry_after));
        let name = key.strip_prefix("retry.").unwrap_or("default");
        out += &format!(
            "  {name:<24} {:<40} worst case {worst}, with handler delays {with}\n",
            describe(ladder)
        );
    }
    out
}

fn describe(ladder: &RetryLadder) -> String {
    let rungs: Vec<String> = ladder.rungs.iter().map(|d| human(*d)).collect();
    let percent = format!("{:.1}", ladder.jitter * 100.0);
    format!(
        "[{}] ±{}%",
        rungs.join(", "),
        percent.trim_end_matches(".0")
    )
}

/// The worker's settings, one line each.
fn report_worker(c: &CliConfig) -> String {
    let w = &c.worker;
    let pool = match c.pool_size {
        Some(n) => format!("{n} connections (PostgreSQL; SQLite ignores it)"),
        None => format!("default: {}", crate::worker::default_pool()),
    };
    let lines = [
        ("max_attempts", w.max_attempts.to_string()),
        ("lease", human(w.lease)),
        ("job timeout", human(w.job_timeout)),
        ("rescue interval", human(w.rescue_interval)),
        ("poll interval", human(w.poll_interval)),
        ("max_retry_after", human(w.max_retry_after)),
        ("max_snooze", human(w.max_snooze)),
        ("max_snoozes", w.max_snoozes.to_string()),
        ("pool size", pool),
    ];
    let mut out = "\nattempts, timing, handler delays and pool\n".to_owned();
    for (name, value) in lines {
        out += &format!("  {name:<18} {value}\n");
    }
    out
}

/// Every term of the horizon, one line each: name, duration, where it comes from.
fn report_horizon(c: &CliConfig, h: &Horizon) -> String {
    let mut out = "\nretry horizon (every delay a job can take)\n".to_owned();
    for (name, d, source) in horizon_terms(c, h) {
        let line = format!("  {name:<18} {:<16} {source}", human(d));
        out += line.trim_end();
        out += "\n";
    }
    out
}

/// The terms of the horizon, its total, the margin and the window they require.
fn horizon_terms(c: &CliConfig, h: &Horizon) -> [(&'static str, Duration, String); 7] {
    let w = &c.worker;
    let run = format!(
        "job timeout {} + lease {} + rescue interval {}",
        human(w.job_timeout),
        human(w.lease),
        human(w.rescue_interval)
    );
    let handler = format!(
        "handlers' retry_after, up to max_retry_after {}, in place of shorter rungs",
        human(w.max_retry_after)
    );
    let snooze = format!("max_snooze {}", human(w.max_snooze));
    let window = "total + margin, for enqueue and effect keys".to_owned();
    [
        (
            "ladder part",
            h.ladder,
            "the longest ladder's worst case".into(),
        ),
        ("handler delays", h.handler_delays, handler),
        (
            "snoozes part",
            h.snoozes,
            format!("{} × ({snooze} + {run})", h.max_snoozes),
        ),
        (
            "attempts part",
            h.attempts,
            format!("{} × ({run})", h.max_attempts),
        ),
        ("total", h.total, String::new()),
        ("margin", HORIZON_MARGIN, String::new()),
        ("required window", h.required_retention(), window),
    ]
}

/// How old a dead job's first attempt may be for `idem dead retry` without `--force`.
fn report_operator_retry(c: &CliConfig, h: &Horizon) -> String {
    let verdict = match h.retry_allowance(c.retention.effect_keys) {
        Some(a) => format!(
            "without --force if its first attempt started at most {} ago (effect-key \
             retention − required window)",
            human(a)
        ),
        None => "only with --force: the effect-key retention is shorter than the required \
                 window"
            .to_owned(),
    };
    format!("\noperator retry of a dead job\n  {verdict}\n")
}

fn report_retention(c: &CliConfig, h: &Horizon) -> String {
    let mut out = "\nretention\n".to_owned();
    for w in c.retention.checks(h) {
        let setting = w.setting.strip_prefix("retention.").unwrap_or(w.setting);
        let verdict = match &w.verdict {
            Ok(what) => what.to_string(),
            Err(why) => format!("REFUSED\n      {why}"),
        };
        out += &format!("  {setting:<18} {:<16} {verdict}\n", human(w.value));
    }
    out
}

/// What `idem config check --json` prints: the text report's sections, durations in
/// seconds.
fn report_json(c: &CliConfig) -> serde_json::Value {
    let h = c.horizon();
    let w = &c.worker;
    serde_json::json!({
        "source": c.source.as_ref().map(|p| p.display().to_string()),
        "ok": c.check().is_ok(),
        "ladders": ladders_json(c),
        "max_attempts": w.max_attempts,
        "lease_secs": secs(w.lease),
        "job_timeout_secs": secs(w.job_timeout),
        "rescue_interval_secs": secs(w.rescue_interval),
        "poll_interval_secs": secs(w.poll_interval),
        "pool_size": c.pool_size,
        "max_retry_after_secs": secs(w.max_retry_after),
        "max_snooze_secs": secs(w.max_snooze),
        "max_snoozes": w.max_snoozes,
        "horizon": horizon_json(c, &h),
        "retention": retention_json(c, &h),
        "operator_retry_allowance_secs": h.retry_allowance(c.retention.effect_keys).map(secs),
    })
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ladders_json(c: &CliConfig) -> Vec<serde_json::Value> {
    let ladder = |(name, l): (String, &RetryLadder)| {
        let rungs: Vec<f64> = l.rungs.iter().map(|d| secs(*d)).collect();
        serde_json::json!({ "name": name, "rungs_secs": rungs, "jitter": l.jitter })
    };
    c.named_ladders().into_iter().map(ladder).collect()
}

/// The horizon's terms as the text report names them (`ladder part`, …, `required
/// window`), keyed by name.
fn horizon_json(c: &CliConfig, h: &Horizon) -> serde_json::Value {
    let terms = horizon_terms(c, h).into_iter().map(|(name, d, source)| {
        let value = serde_json::json!({ "secs": secs(d), "source": source });
        (name.replace(' ', "_"), value)
    });
    serde_json::Value::Object(terms.collect())
}

fn retention_json(c: &CliConfig, h: &Horizon) -> Vec<serde_json::Value> {
    let window = |w: idem::WindowCheck| {
        let (ok, verdict) = match w.verdict {
            Ok(what) => (true, what.to_owned()),
            Err(why) => (false, why),
        };
        serde_json::json!({ "setting": w.setting, "secs": secs(w.value), "ok": ok,
                            "verdict": verdict })
    };
    c.retention.checks(h).into_iter().map(window).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[retry]
ladder = ["5s", "30s", "2m", "10m", "1h", "3h", "6h"]
jitter = 0.1
max_attempts = 8
max_retry_after = "1h"
max_snooze = "1h"
max_snoozes = 10
[retry.queues.mail]
ladder = ["1s", "10s"]
[retry.kinds.receipt-mail]
ladder = ["2s"]
jitter = 0.0
[worker]
lease = "30s"
job_timeout = "60s"
rescue_interval = "5s"
poll_interval = "2s"
pool_size = 40
[retention]
enqueue_keys = "3d"
effect_keys = "3d"
intents = "3d"
finished_jobs = "3d"
dead_jobs = "7d"
"#;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn error_of(text: &str) -> String {
        format!("{:#}", CliConfig::parse(text).unwrap_err())
    }

    #[test]
    fn a_good_file_parses_into_every_setting() {
        let c = CliConfig::parse(GOOD).unwrap();
        assert_eq!(c.worker.ladder, RetryLadder::default());
        assert_eq!(
            c.worker.queue_ladders["mail"],
            RetryLadder::new([secs(1), secs(10)]).jitter(0.1)
        );
        assert_eq!(
            c.worker.kind_ladders["receipt-mail"],
            RetryLadder::new([secs(2)]).jitter(0.0)
        );
        assert_eq!(
            (c.worker.max_attempts, c.worker.lease, c.worker.job_timeout),
            (8, secs(30), secs(60))
        );
        assert_eq!(c.worker.rescue_interval, secs(5));
        assert_eq!(c.worker.poll_interval, secs(2));
        assert_eq!(c.pool_size, NonZeroU32::new(40));
        assert_eq!(
            (
                c.worker.max_retry_after,
                c.worker.max_snooze,
                c.worker.max_snoozes
            ),
            (secs(3600), secs(3600), 10)
        );
        assert_eq!(c.retention, Retention::default());
        c.check().unwrap();
        assert_eq!(c.horizon(), CliConfig::default().horizon());
    }

    #[test]
    fn periodic_entries_are_checked_when_parsed() {
        let entry = "[[periodic]]\nname = \"p\"\nschedule = \"0 3 * * *\"\nkind = \"k\"\n";
        let c = CliConfig::parse(entry).unwrap();
        let built = c.schedules().unwrap();
        assert_eq!((built[0].name(), built[0].schedule()), ("p", "0 3 * * *"));
        let twice = error_of(&format!("{entry}{entry}"));
        assert!(twice.contains("named twice"), "{twice}");
        let bad = error_of(&entry.replace("0 3 * * *", "0 3 * *"));
        assert!(
            bad.contains("\"p\"") && bad.contains("not a cron expression"),
            "{bad}"
        );
        let unknown = error_of(&format!("{entry}shedule = \"x\"\n"));
        assert!(unknown.contains("shedule"), "{unknown}");
        let catch_up = error_of(&format!("{entry}catch_up = \"soon\"\n"));
        assert!(
            catch_up.contains("catch_up") && catch_up.contains("soon"),
            "{catch_up}"
        );
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(CliConfig::parse("").unwrap(), CliConfig::default());
    }

    #[test]
    fn an_unknown_key_is_named() {
        let err = error_of("[worker]\nlease = \"30s\"\nleese = \"1m\"\n");
        assert!(err.contains("leese"), "{err}");
        let err = error_of("[retry.queues.mail]\nladdr = [\"1s\"]\n");
        assert!(err.contains("laddr"), "{err}");
        let err = error_of("[retension]\n");
        assert!(err.contains("retension"), "{err}");
    }

    #[test]
    fn a_bad_duration_names_its_key_and_value() {
        let err = error_of("[retention]\neffect_keys = \"3 dayz\"\n");
        assert!(
            err.contains("retention.effect_keys = \"3 dayz\" is not a duration"),
            "{err}"
        );
        let err = error_of("[retry.kinds.x]\nladder = [\"1s\", \"soon\"]\n");
        assert!(err.contains("retry.kinds.x.ladder[1] = \"soon\""), "{err}");
        let err = error_of("[worker]\nlease = \"0s\"\n");
        assert!(
            err.contains("worker.lease = \"0s\": it must be longer than zero"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_ladder_or_max_attempts_is_named() {
        let err = error_of("[retry.queues.mail]\nladder = []\n");
        assert!(
            err.contains("retry.queues.mail: the retry ladder is []"),
            "{err}"
        );
        let err = error_of("[retry]\njitter = 1.5\n");
        assert!(err.contains("retry: retry jitter is 1.5"), "{err}");
        let err = error_of("[retry]\nmax_attempts = 0\n");
        assert!(err.contains("retry.max_attempts is 0"), "{err}");
    }

    #[test]
    fn a_short_retention_is_refused_with_both_numbers() {
        let c = CliConfig::parse("[retention]\nenqueue_keys = \"2h\"\n").unwrap();
        let h = c.horizon();
        let err = c.check().unwrap_err().to_string();
        assert!(
            err.contains(&format!("enqueue-key retention {}", human(secs(7200)))),
            "{err}"
        );
        assert!(
            err.contains(&format!("retry horizon {}", human(h.total))),
            "{err}"
        );
        let report = report(&c);
        assert!(
            report.contains("REFUSED\n      enqueue-key retention 2h"),
            "{report}"
        );
        assert!(
            report.contains("covers the retry horizon plus the margin"),
            "{report}"
        );
    }

    #[test]
    fn the_bounds_on_handler_delays_are_read() {
        let c = CliConfig::parse(
            "[retry]\nmax_retry_after = \"10m\"\nmax_snooze = \"30s\"\nmax_snoozes = 0\n",
        )
        .unwrap();
        assert_eq!(
            (
                c.worker.max_retry_after,
                c.worker.max_snooze,
                c.worker.max_snoozes
            ),
            (secs(600), secs(30), 0)
        );
        assert_eq!(c.horizon().snoozes, Duration::ZERO);
        c.check().unwrap();
        let err = error_of("[retry]\nmax_snoozes = -1\n");
        assert!(err.contains("retry.max_snoozes is -1"), "{err}");
        let err = error_of("[retry]\nmax_retry_after = \"later\"\n");
        assert!(
            err.contains("retry.max_retry_after = \"later\" is not a duration"),
            "{err}"
        );
        let err = error_of("[retry]\nmax_snooze = \"0s\"\n");
        assert!(
            err.contains("retry.max_snooze = \"0s\": it must be longer"),
            "{err}"
        );
    }

    #[test]
    fn long_handler_delays_lengthen_the_horizon_past_the_windows() {
        let c = CliConfig::parse("[retry]\nmax_retry_after = \"1d\"\n").unwrap();
        assert_eq!(
            c.horizon().ladder + c.horizon().handler_delays,
            7 * secs(86_400)
        );
        let err = c.check().unwrap_err().to_string();
        assert!(err.contains("effect-key retention 3d is shorter"), "{err}");
        let r = report(&c);
        assert!(r.contains("only with --force"), "{r}");
    }

    #[test]
    fn what_a_worker_refuses_is_refused() {
        let c = CliConfig::parse("[worker]\nlease = \"50ms\"\n").unwrap();
        let err = c.check().unwrap_err().to_string();
        assert!(err.contains("lease is 50ms"), "{err}");
    }

    #[test]
    fn a_long_queue_ladder_lengthens_the_horizon() {
        let c = CliConfig::parse("[retry.queues.slow]\nladder = [\"1d\"]\njitter = 0\n").unwrap();
        assert_eq!(c.horizon().ladder, 7 * secs(86_400));
        let err = c.check().unwrap_err().to_string();
        assert!(err.contains("enqueue-key retention 3d is shorter"), "{err}");
        assert!(err.contains("effect-key retention 3d is shorter"), "{err}");
    }

    #[test]
    fn the_report_shows_the_source_ladders_and_horizon() {
        let c = CliConfig::parse(GOOD).unwrap();
        let r = report(&c);
        assert!(r.contains("built-in defaults"), "{r}");
        assert!(r.contains("queues.mail"), "{r}");
        assert!(r.contains("kinds.receipt-mail"), "{r}");
        assert!(r.contains(&human(c.horizon().total)), "{r}");
    }

    /// The line of `report` that starts with `name` (after its indent).
    fn line<'a>(report: &'a str, name: &str) -> &'a str {
        report
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no line {name:?} in {report}"))
    }

    #[test]
    fn the_report_prints_the_poll_interval_and_the_pool_size() {
        let r = report(&CliConfig::default());
        assert!(line(&r, "poll interval").ends_with(" 0.5s"), "{r}");
        let pool = line(&r, "pool size");
        assert!(
            pool.contains("default: the jobs at once + 8 for transactions")
                && pool.contains("at least 25")
                && pool.contains("at most 60"),
            "{pool}"
        );
        let c = CliConfig::parse(GOOD).unwrap();
        let r = report(&c);
        assert!(line(&r, "poll interval").ends_with(" 2s"), "{r}");
        assert!(line(&r, "pool size").contains(" 40 connections"), "{r}");
        let json = report_json(&c);
        assert_eq!(
            (&json["poll_interval_secs"], &json["pool_size"]),
            (&serde_json::json!(2.0), &serde_json::json!(40))
        );
        assert!(report_json(&CliConfig::default())["pool_size"].is_null());
    }

    #[test]
    fn the_report_prints_every_term_of_the_horizon() {
        let c = CliConfig::default();
        let r = report(&c);
        let worst = line(&r, "default ");
        assert!(
            worst.contains("worst case 11h 13m 50.5s, with handler delays 15h"),
            "{worst}"
        );
        for (name, value, source) in [
            (
                "ladder part",
                "11h 13m 50.5s",
                "the longest ladder's worst case",
            ),
            ("handler delays", "3h 46m 9.5s", "up to max_retry_after 1h"),
            (
                "snoozes part",
                "10h 15m 50s",
                "10 × (max_snooze 1h + job timeout 1m + lease 30s + rescue interval 5s)",
            ),
            (
                "attempts part",
                "12m 40s",
                "8 × (job timeout 1m + lease 30s + rescue interval 5s)",
            ),
            ("total", "1d 1h 28m 30s", ""),
            ("margin", "1h", ""),
            ("required window", "1d 2h 28m 30s", "total + margin"),
        ] {
            let l = line(&r, name);
            assert!(l.contains(value) && l.contains(source), "{l}");
        }
        assert!(line(&r, "max_snoozes").ends_with(" 10"), "{r}");
        let retry = line(&r, "without --force");
        assert!(retry.contains("at most 1d 21h 31m 30s ago"), "{retry}");
        let effect = line(&r, "effect_keys");
        assert!(
            effect.contains("3d") && effect.contains("covers the retry horizon"),
            "{effect}"
        );
    }
}
