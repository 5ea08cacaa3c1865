//! What the remote-effect tests share: the `http` kind with a long lease, a plain HTTP
//! client, the lookup of a `MockRemote`'s copies, and reads of jobs and requests.

use std::time::Duration;

use idem::intent::Lookup;
use idem::{Idem, IntentRow, JobRow, JobState};
use idem_mock_remote::MockRemote;
use idem_store_tests::harness::within;

/// The intent lease of the tests' handlers: long in real time, so no renewal runs while
/// a test lasts; the tests move injected time past it instead.
pub const LEASE: Duration = Duration::from_secs(600);

/// The `http` kind with [`LEASE`] and a call timeout of `call_timeout`.
pub fn http_kind(call_timeout: Duration) -> idem::builtin::Http {
    idem::builtin::Http::new(idem::builtin::HttpConfig {
        call_timeout,
        lease: LEASE,
        ..Default::default()
    })
    .expect("http kind")
}

/// A plain HTTP client; the crypto provider is the one the workspace builds.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// Applies an effect at the mock remote at `remote_url` with key `key`; the remote's id.
pub async fn post_effect(
    remote_url: &str,
    key: &str,
    body: &impl serde::Serialize,
) -> Result<String, String> {
    let resp = http_client()
        .post(format!("{remote_url}/effects"))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
    Ok(body["id"].as_str().unwrap_or_default().to_owned())
}

/// Looks the call of `intent` up at the mock remote at `remote_url`, by its key.
pub async fn lookup_copies(remote_url: &str, intent: &IntentRow) -> Lookup {
    let mut url = reqwest::Url::parse(&format!("{remote_url}/effects")).expect("url");
    url.query_pairs_mut().append_pair("reference", &intent.key);
    match http_client().get(url).send().await {
        Ok(r) if r.status() == 404 => Lookup::Absent,
        Ok(r) if r.status() == 200 => {
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            let ids = body["ids"].as_array().cloned().unwrap_or_default();
            let ids = ids.iter().filter_map(|i| i.as_str().map(str::to_owned));
            Lookup::of_copies(ids.collect())
        }
        Ok(r) => Lookup::CannotTell(format!("lookup answered {}", r.status())),
        Err(e) => Lookup::CannotTell(e.to_string()),
    }
}

/// The intent under `key`, if any.
pub async fn intent_of(idem: &Idem, key: &str) -> Option<IntentRow> {
    idem.store().intent_get(key.to_owned()).await.expect("read")
}

/// The keys of the POST requests the remote received, in order.
pub fn post_keys(remote: &MockRemote) -> Vec<Option<String>> {
    let posts = remote.log().into_iter().filter(|e| e.method == "POST");
    posts.map(|e| e.key).collect()
}

/// Waits until the job is in `state`; returns it.
pub async fn wait_state(idem: &Idem, id: i64, state: JobState) -> JobRow {
    let reached = async {
        loop {
            let job = super::job(idem, id).await;
            if job.state == state {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(60, "the job reaches its state", reached).await
}
