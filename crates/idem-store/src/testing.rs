//! What the PostgreSQL tests of every crate do when `IDEM_TEST_PG_URL` (or the TLS
//! tests' `IDEM_TEST_PG_TLS_URL`) is or is not set: one rule, so no crate's PostgreSQL
//! test can skip silently in CI.

/// The variable naming the PostgreSQL server the tests may create schemas on.
pub const PG_URL_ENV: &str = "IDEM_TEST_PG_URL";

/// The variable naming the same kind of server reached over TLS with the server's
/// certificate verified, e.g. `postgres://postgres@localhost:5432/test?sslmode=verify-full&sslrootcert=/etc/ssl/certs/ssl-cert-snakeoil.pem`.
pub const PG_TLS_URL_ENV: &str = "IDEM_TEST_PG_TLS_URL";

/// What the PostgreSQL tests do, given `IDEM_TEST_PG_URL` and `CI`.
#[derive(Debug, PartialEq, Eq)]
pub enum PgUrlChoice {
    /// Run against this server.
    Use(String),
    /// Skip, with this notice.
    Skip(String),
    /// Fail the test, with this message.
    Fail(String),
}

/// The decision for `IDEM_TEST_PG_URL`'s value and the `CI` variable's value: run when a
/// URL is given, fail under CI without one, else skip with a notice.
pub fn pg_url_choice(url: Option<String>, ci: Option<String>) -> PgUrlChoice {
    url_choice(PG_URL_ENV, url, ci)
}

/// [`pg_url_choice`] for the URL variable `var`.
pub fn url_choice(var: &str, url: Option<String>, ci: Option<String>) -> PgUrlChoice {
    if let Some(url) = url.filter(|u| !u.trim().is_empty()) {
        return PgUrlChoice::Use(url);
    }
    let in_ci = ci.is_some_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    if in_ci {
        return PgUrlChoice::Fail(format!(
            "{var} is not set but CI is: the PostgreSQL tests must run in CI. Set \
             {var}=postgres://user@host:port/db (a server the tests may create schemas on)."
        ));
    }
    PgUrlChoice::Skip(format!(
        "NOTICE: {var} is not set: the PostgreSQL tests that need it are SKIPPED. Set \
         {var}=postgres://postgres@127.0.0.1:5432/test to run them."
    ))
}

/// [`pg_url_choice`] from the environment.
pub fn pg_url_from_env() -> PgUrlChoice {
    url_from_env(PG_URL_ENV)
}

/// The URL of [`pg_url_from_env`] to use; `None` after printing the notice when the
/// tests are to be skipped; a panic where they must run (under CI) without one.
pub fn pg_url_or_skip() -> Option<String> {
    match pg_url_from_env() {
        PgUrlChoice::Use(url) => Some(url),
        PgUrlChoice::Skip(notice) => {
            eprintln!("{notice}");
            None
        }
        PgUrlChoice::Fail(why) => panic!("{why}"),
    }
}

/// [`url_choice`] for the variable `var`, from the environment.
pub fn url_from_env(var: &str) -> PgUrlChoice {
    url_choice(var, std::env::var(var).ok(), std::env::var("CI").ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_url_is_used_in_and_out_of_ci() {
        let url = || Some("postgres://h/db".to_owned());
        let used = PgUrlChoice::Use("postgres://h/db".into());
        assert_eq!(pg_url_choice(url(), None), used);
        assert_eq!(pg_url_choice(url(), Some("true".into())), used);
    }

    #[test]
    fn an_unset_url_skips_outside_ci_and_fails_in_ci() {
        for ci in [
            None,
            Some(String::new()),
            Some("false".into()),
            Some("0".into()),
        ] {
            let choice = pg_url_choice(None, ci.clone());
            assert!(
                matches!(&choice, PgUrlChoice::Skip(n) if n.contains(PG_URL_ENV)),
                "{ci:?}"
            );
        }
        let empty = pg_url_choice(Some("  ".into()), Some("true".into()));
        assert!(
            matches!(&empty, PgUrlChoice::Fail(m) if m.contains("CI")),
            "{empty:?}"
        );
        assert!(matches!(
            pg_url_choice(None, Some("1".into())),
            PgUrlChoice::Fail(_)
        ));
    }
}
