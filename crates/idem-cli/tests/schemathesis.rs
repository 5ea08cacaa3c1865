//! The HTTP API fuzzed against its own OpenAPI document with schemathesis (PyPI), on both
//! stores: a real `idem serve` (operator token, `--no-workers`) over a fresh database with
//! a few jobs in it, and `st run` on its `/openapi.json` with a bounded number of
//! examples per operation, derandomized. No answer may be a 5xx, carry a status, a
//! content type or headers the document does not list for the operation, or have a body
//! its schema refuses; authentication must be enforced, an unsupported method refused
//! with its `Allow` header, and the stateful links between operations hold.
//!
//! schemathesis lives in a virtualenv under the target directory, made (once) by
//! `scripts/schemathesis-env`, which pins its version. Without `python3` the test fails
//! under `CI=true` and is skipped with a notice otherwise.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::serve::{Api, Serve};
use common::*;
use serde_json::json;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/schemathesis-env"
);

/// The operator's token: the fuzzer sees and may touch everything.
const TOKEN: &str = "fuzz-token-0123456789abcdef";

/// Test cases per operation and phase: enough to reach every parameter, bounded so one
/// store takes about 20 s on two cores.
const MAX_EXAMPLES: &str = "50";

/// The seed, for a run without `--generation-deterministic` (which ignores it).
const SEED: &str = "20240611";

/// Every check of `st run --checks all` but these, which cannot hold:
/// - `positive_data_acceptance` expects every request the schema allows to succeed, but
///   the server checks more than the schema says (a job kind's syntax, lease and page
///   bounds, a fence being the current claim, a record existing), and serde refuses a
///   float such as `7.0` where the schema's `integer` allows it.
const EXCLUDED: &str = "positive_data_acceptance";

#[test]
fn sqlite_the_api_keeps_to_its_openapi_document() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let Some(st) = schemathesis() else {
        return;
    };
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    fuzz(&st, tmp.path(), &url, "sqlite");
}

#[test]
fn postgres_the_api_keeps_to_its_openapi_document() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(pg) = PgSchema::migrated(tmp.path()) else {
        return;
    };
    let Some(st) = schemathesis() else {
        return;
    };
    fuzz(&st, tmp.path(), &pg.url, "postgres");
}

/// Serves `url`, puts a few jobs in it, and runs `st` against the server.
fn fuzz(st: &Path, tmp: &Path, url: &str, store: &str) {
    let mut serve = serve(tmp, url);
    let api = Api::new(&serve.base);
    for (kind, queue) in [
        ("email", "default"),
        ("report", "default"),
        ("sync", "other"),
    ] {
        let body = json!({"kind": kind, "queue": queue, "args": {"n": 1}});
        let (status, answer) = api.call(reqwest::Method::POST, "/v1/jobs", TOKEN, Some(body));
        assert_eq!(status, 201, "POST /v1/jobs: {answer}");
    }
    let (status, answer) = api.call(reqwest::Method::POST, "/v1/jobs/1/cancel", TOKEN, None);
    assert_eq!(status, 200, "POST /v1/jobs/1/cancel: {answer}");

    let started = Instant::now();
    let mut cmd = Command::new(st);
    cmd.current_dir(tmp)
        .args(st_args(&serve.base))
        .env("NO_COLOR", "1")
        .env("TMPDIR", tmp);
    let (status, out) = run(cmd);
    eprintln!("{store}: st run took {:.1?}", started.elapsed());
    assert!(
        status.success(),
        "st {} failed ({status}):\n{out}\n--- idem serve\n{}",
        st_args(&serve.base).join(" "),
        serve.running.output()
    );
    serve.stop();
}

/// The arguments of `st` against the server at `base`.
fn st_args(base: &str) -> Vec<String> {
    let args = [
        "run",
        &format!("{base}/openapi.json"),
        "--header",
        &format!("Authorization: Bearer {TOKEN}"),
        "--checks",
        "all",
        "--exclude-checks",
        EXCLUDED,
        "--max-examples",
        MAX_EXAMPLES,
        "--seed",
        SEED,
        // Hypothesis derandomized: the same cases every run (schemathesis then ignores
        // the seed, kept for a run without this flag), and no example database.
        "--generation-deterministic",
        // One worker: with two, CPython 3.11 (Debian's) crashed inside the fuzzer now and
        // then (`SystemError: AST constructor recursion depth mismatch`, ast.parse on two
        // threads at once, python/cpython#106905), which is no answer of the API.
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-color",
    ];
    args.iter().map(|a| a.to_string()).collect()
}

/// The `st` executable, installed by [`SCRIPT`] on first use; `None` (after a notice)
/// when `python3` is missing outside CI.
fn schemathesis() -> Option<PathBuf> {
    let python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        let why = "python3 is not on PATH, and schemathesis is Python";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why} (CI=true: the fuzz test may not be skipped)");
        }
        eprintln!("skipped: {why}");
        return None;
    }
    let out = Command::new("bash")
        .arg(SCRIPT)
        .output()
        .expect("run scripts/schemathesis-env");
    assert!(
        out.status.success(),
        "scripts/schemathesis-env failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let st = String::from_utf8(out.stdout).expect("a path");
    let st = PathBuf::from(st.trim());
    assert!(st.is_file(), "scripts/schemathesis-env printed {st:?}");
    Some(st)
}

/// `idem serve --no-workers` on a free loopback port with the operator token [`TOKEN`].
fn serve(tmp: &Path, url: &str) -> Serve {
    let mut cmd = idem(tmp);
    cmd.current_dir(tmp)
        .arg("--database-url")
        .arg(url)
        .args(["serve", "--listen", "127.0.0.1:0", "--no-workers"])
        .env("IDEM_API_TOKENS", format!("fuzz={TOKEN}"))
        .env("IDEM_API_OPERATORS", "fuzz")
        .env_remove("IDEM_CONFIG");
    Serve::start(cmd)
}
