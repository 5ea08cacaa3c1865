//! `idem enqueue`: one job from the command line, into an existing database whose
//! schema is current: any kind with `--kind K --args JSON`, or a job of the built-in
//! `http` kind with `idem enqueue http --url …`, whose flags become its `HttpArgs`.
//!
//! What must stay true: the input is checked before the database is opened, so a wrong
//! value is a usage error (exit 2) whatever the database, and nothing is created. For
//! `http` that is the library's own check of the job's arguments (`HttpArgs::check`,
//! the one the kind runs before a call), against the kind's default call timeout, after
//! the flags' own syntax (`Name: value` headers, a JSON body).

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use idem::Job;
use idem::builtin::{HttpArgs, HttpConfig};

use crate::database;
use crate::exit::{Exit, OrExit, fail};
use crate::output::print_json;

/// Arguments of `idem enqueue`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EnqueueArgs {
    #[command(subcommand)]
    builtin: Option<Builtin>,
    /// Job kind (the handler's name)
    #[arg(long, required = true)]
    kind: Option<String>,
    /// Arguments as JSON
    #[arg(long, default_value = "{}")]
    args: String,
    #[command(flatten)]
    job: JobArgs,
}

/// A job of a kind idem provides, with flags for its arguments.
#[derive(Subcommand)]
enum Builtin {
    /// Enqueue a job of the built-in `http` kind: one call to another service, made
    /// through an intent (run by `idem worker`)
    ///
    /// The call carries `Idempotency-Key: http:key:{queue}:{enqueue key}` (with
    /// --enqueue-key) or `http:job:{id}`: the same key on every attempt. 2xx completes
    /// the job; a 4xx other than 408/409/425/429 makes it dead; 5xx, timeouts and resets
    /// are sent again with the same key, unless --unkeyed: then the outcome is unknown,
    /// the job stops (dead) and `idem reconcile` looks the call up at --lookup-url
    /// (`GET {lookup-url}?reference={key}`: 200 applied, 404 not applied) or an operator
    /// settles it with `idem intents resolve`.
    Http(Box<HttpFlags>),
}

/// The flags of `idem enqueue http`.
#[derive(Args)]
struct HttpFlags {
    /// The target, an http:// or https:// URL
    #[arg(long, value_name = "URL")]
    url: String,
    /// The HTTP method [default: POST]
    #[arg(long, value_name = "M")]
    method: Option<String>,
    /// A request header, `Name: value` (repeat for several); Idempotency-Key, Host and
    /// Content-Length are set by idem
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// A JSON body
    #[arg(long, value_name = "JSON")]
    body: Option<String>,
    /// The call's timeout in milliseconds, 1 to the kind's call timeout [default: the
    /// call timeout, 30000]
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// The remote ignores Idempotency-Key: an unclear outcome is never sent again
    /// blindly but goes to reconciliation (give --lookup-url)
    #[arg(long)]
    unkeyed: bool,
    /// Where reconciliation looks an unkeyed call up: `GET {URL}?reference={key}`
    /// answers 200 (applied; a JSON `ids` array lists the copies) or 404 (not applied)
    #[arg(long, value_name = "URL")]
    lookup_url: Option<String>,
    #[command(flatten)]
    job: JobArgs,
}

/// The flags every enqueue takes: where and when the job runs, and its enqueue key.
#[derive(Args)]
struct JobArgs {
    /// Queue
    #[arg(long, default_value = "default")]
    queue: String,
    /// Priority; lower runs first
    #[arg(long, default_value_t = 0)]
    priority: i16,
    /// Earliest start, RFC 3339 (e.g. 2026-12-01T10:00:00Z)
    #[arg(long)]
    run_at: Option<String>,
    /// Attempts before the job is dead
    #[arg(long)]
    max_attempts: Option<i32>,
    /// Makes the enqueue idempotent: the same key in the same queue inside the retention
    /// window returns the first job ("deduplicated": true)
    #[arg(long)]
    enqueue_key: Option<String>,
}

/// `idem enqueue`: prints the job (and whether it was deduplicated) as JSON.
pub async fn run(url: &str, a: EnqueueArgs) -> anyhow::Result<ExitCode> {
    let job = match a.builtin {
        Some(Builtin::Http(flags)) => http_job(*flags)?,
        None => {
            let kind = a.kind.expect("clap requires --kind without a subcommand");
            a.job.job(kind, parse_json("--args", &a.args)?)?
        }
    };
    let idem = database::open(url).await?;
    print_json(&idem.enqueue(job).await?)?;
    // Wakes the workers of other processes before this one exits.
    idem.close().await;
    Ok(ExitCode::SUCCESS)
}

impl JobArgs {
    /// The job of `kind` with `args` these flags describe, checked.
    fn job(self, kind: String, args: serde_json::Value) -> anyhow::Result<Job> {
        let mut job = Job::new(kind, args)
            .queue(self.queue)
            .priority(self.priority);
        if let Some(at) = self.run_at {
            let at = chrono::DateTime::parse_from_rfc3339(&at)
                .map_err(|e| anyhow::anyhow!("--run-at {at:?} is not an RFC 3339 time: {e}"))
                .or_exit(Exit::Usage)?;
            job = job.run_at(at.with_timezone(&chrono::Utc));
        }
        if let Some(n) = self.max_attempts {
            job = job.max_attempts(n);
        }
        if let Some(key) = self.enqueue_key {
            job = job.enqueue_key(key);
        }
        job.validate()?;
        Ok(job)
    }
}

pub fn parse_json(flag: &str, text: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("{flag} is not valid JSON: {text:?}: {e}"))
        .or_exit(Exit::Usage)
}

/// The `http` job the flags describe, checked.
fn http_job(f: HttpFlags) -> anyhow::Result<Job> {
    let args = http_args(&f)?;
    if !args.keyed && args.lookup_url.is_none() {
        eprintln!(
            "note: --unkeyed without --lookup-url: if the call's outcome is unknown, only \
             `idem intents resolve` can settle it"
        );
    }
    let value = serde_json::to_value(&args)?;
    f.job.job(
        <idem::builtin::Http as idem::Handler>::KIND.to_owned(),
        value,
    )
}

/// The job's arguments; each bad flag is a usage error naming it. The flags' syntax is
/// checked here, then the library's own check of an `http` job's arguments, the one the
/// kind runs before a call, with its field names turned into the flags'.
fn http_args(f: &HttpFlags) -> anyhow::Result<HttpArgs> {
    let body = f
        .body
        .as_deref()
        .map(|b| parse_json("--body", b))
        .transpose()?;
    let args = HttpArgs {
        url: f.url.clone(),
        method: f.method.as_ref().map(|m| m.to_ascii_uppercase()),
        headers: headers(&f.headers)?,
        body,
        timeout_ms: f.timeout_ms,
        keyed: !f.unkeyed,
        lookup_url: f.lookup_url.clone(),
    };
    args.check(HttpConfig::default().call_timeout)
        .map_err(|e| usage(as_flags(&e)))?;
    Ok(args)
}

/// A library message about an `http` job's fields, naming the flags instead.
fn as_flags(message: &str) -> String {
    let fields = [
        ("lookup_url ", "--lookup-url "),
        ("timeout_ms ", "--timeout-ms "),
        ("url ", "--url "),
        ("method ", "--method "),
        ("header ", "--header "),
    ];
    for (field, flag) in fields {
        if let Some(rest) = message.strip_prefix(field) {
            return format!("{flag}{rest}");
        }
    }
    message.to_owned()
}

fn usage(message: String) -> anyhow::Error {
    fail(Exit::Usage, message)
}

/// An HTTP token (RFC 9110): the characters of a method or a header name.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

/// The headers of `Name: value` flags; a name given twice is refused.
fn headers(flags: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut headers = BTreeMap::new();
    let mut seen = Vec::new();
    for flag in flags {
        let (name, value) = header(flag)?;
        let lower = name.to_ascii_lowercase();
        if seen.contains(&lower) {
            return Err(usage(format!(
                "--header {name:?} is given twice; give each header once"
            )));
        }
        seen.push(lower);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// One `Name: value` flag, checked.
fn header(flag: &str) -> anyhow::Result<(String, String)> {
    let Some((name, value)) = flag.split_once(':') else {
        return Err(usage(format!(
            "--header {flag:?} has no colon: write it as 'Name: value'"
        )));
    };
    let (name, value) = (name.trim(), value.trim());
    if !is_token(name) {
        return Err(usage(format!(
            "--header {flag:?}: {name:?} is not a header name (letters, digits and \
             !#$%&'*+-.^_`|~ only)"
        )));
    }
    if ["idempotency-key", "host", "content-length"].contains(&name.to_ascii_lowercase().as_str()) {
        return Err(usage(format!(
            "--header {name:?} is set by idem (the Idempotency-Key is the intent's key, the \
             same on every attempt); remove it"
        )));
    }
    if !value.chars().all(|c| c == '\t' || (' '..='~').contains(&c)) {
        return Err(usage(format!(
            "--header {name:?} has a value with characters a header cannot carry (only \
             printable ASCII)"
        )));
    }
    Ok((name.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(r: anyhow::Result<impl std::fmt::Debug>) -> String {
        let e = r.unwrap_err();
        assert_eq!(Exit::of(&e), Exit::Usage, "{e:#}");
        e.to_string()
    }

    /// `idem enqueue http --url URL` as parsed.
    #[derive(clap::Parser)]
    struct Parsed {
        #[command(flatten)]
        flags: HttpFlags,
    }

    fn flags(url: &str) -> HttpFlags {
        use clap::Parser;
        Parsed::try_parse_from(["http", "--url", url])
            .expect("flags")
            .flags
    }

    #[test]
    fn the_librarys_check_names_the_flags() {
        http_args(&flags("https://api.example.com/charges?x=1")).unwrap();
        http_args(&flags("http://[::1]:80/x")).unwrap();
        for bad in ["ftp://x/y", "not a url", "mailto:x"] {
            assert!(error(http_args(&flags(bad))).starts_with("--url"), "{bad}");
        }
        let mut f = flags("http://x/");
        f.method = Some("GE T".into());
        assert!(error(http_args(&f)).starts_with("--method"));
        let mut f = flags("http://x/");
        f.timeout_ms = Some(30_001);
        assert!(error(http_args(&f)).contains("1..=30000"));
        let mut f = flags("http://x/");
        f.lookup_url = Some("mailto:x".into());
        assert!(error(http_args(&f)).starts_with("--lookup-url"));
    }

    #[test]
    fn headers_are_name_colon_value_and_never_the_key() {
        let h = headers(&["X-Tenant:  acme ".into(), "Accept: */*".into()]).unwrap();
        assert_eq!(h["X-Tenant"], "acme");
        assert!(error(header("NoColon")).contains("no colon"));
        assert!(error(header("Bad Name: x")).contains("not a header name"));
        assert!(error(header("idempotency-key: k")).contains("set by idem"));
        assert!(error(header("X-A: caf\u{e9}")).contains("printable ASCII"));
        let twice = headers(&["X-A: 1".into(), "x-a: 2".into()]);
        assert!(error(twice).contains("twice"));
    }
}
