//! The batch API (`/v1/batches`) through a real server on loopback, on both stores:
//! create, add, seal and read batches; their principal scoping; an idempotent creation;
//! a batch finished through the worker protocol; and attacks on its input.

mod common;

use common::{Answer, MILL, OPS, SHOP, Server, claim, count, serve};
use idem::MAX_CHILDREN_PER_CALL;
use idem_store_tests::TestDb;
use serde_json::{Value, json};

fn child(n: i64) -> Value {
    json!({"kind": "tally", "queue": "q", "args": {"shop": n}})
}

fn successor() -> Value {
    json!({"kind": "report", "queue": "q", "args": {"month": "2026-11"}})
}

/// Creates a batch as `token` (201 asserted) and returns the answer's JSON.
async fn create(s: &Server, token: &str, body: Value) -> Value {
    let a = s.post(token, "/v1/batches", None, &body).await;
    assert_eq!(a.status, 201, "{a:?}");
    a.json()
}

/// The ids of the children in a batch answer.
fn child_ids(answer: &Value) -> Vec<i64> {
    let children = answer["children"].as_array().unwrap();
    children
        .iter()
        .map(|c| c["job"]["id"].as_i64().unwrap())
        .collect()
}

/// A problem's detail.
fn detail(a: &Answer) -> String {
    a.json()["detail"].as_str().unwrap_or_default().to_string()
}

async fn batches(s: &Server) -> i64 {
    count(s, "SELECT count(*) FROM idem_batch").await
}

/// Completes a claimed job with `result` through the worker protocol.
async fn complete(s: &Server, job: &Value, result: Value) {
    let id = job["id"].as_i64().unwrap();
    let body = json!({"fence": job["fence"], "result": result});
    let done = s
        .post(SHOP, &format!("/v1/jobs/{id}/complete"), None, &body)
        .await;
    assert_eq!(done.status, 200, "{done:?}");
}

/// An open batch is created with its children, added to, read, listed, paged and sealed;
/// a sealed batch takes no more children (409 naming its state).
async fn a_batch_is_created_added_to_read_and_sealed(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1), child(2)], "open": true});
    let created = create(&s, SHOP, body).await;
    let id = created["batch"]["id"].as_i64().unwrap();
    assert_eq!(created["batch"]["state"], "open");
    assert_eq!(created["batch"]["total"], 2);
    assert_eq!(created["batch"]["principal"], "shop");
    assert_eq!(created["batch"]["successor"]["kind"], "report");
    let first = &created["children"][0];
    assert_eq!(
        (
            first["deduplicated"].as_bool(),
            first["job"]["batch_id"].as_i64()
        ),
        (Some(false), Some(id))
    );
    assert!(
        first["job"].get("args").is_none(),
        "an answer leaves args out"
    );

    let path = format!("/v1/batches/{id}/children");
    let added = s
        .post(SHOP, &path, None, &json!({"children": [child(3)]}))
        .await;
    assert_eq!(added.status, 200, "{added:?}");
    assert_eq!(added.json()["batch"]["total"], 3);

    let shown = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(
        (shown["unfinished"].as_i64(), shown["completed"].as_i64()),
        (Some(3), Some(0))
    );
    assert_eq!(shown["states"]["available"], 3);
    assert_eq!(shown["states"]["running"], 0);

    let page = s.get(SHOP, &format!("{path}?limit=2")).await.json();
    let ids = child_ids(&created);
    assert_eq!(page["jobs"][0]["id"].as_i64(), Some(ids[0]), "oldest first");
    assert_eq!(page["jobs"][0]["args"], json!({"shop": 1}));
    let next = page["next"].as_i64().unwrap();
    let rest = s.get(SHOP, &format!("{path}?after={next}")).await.json();
    assert_eq!(
        (
            rest["jobs"].as_array().unwrap().len(),
            rest["next"].as_i64()
        ),
        (1, None)
    );

    let open = s.get(SHOP, "/v1/batches?state=open").await.json();
    assert_eq!(open["batches"][0]["id"].as_i64(), Some(id));
    assert!(open["batches"][0].get("states").is_none());
    let sealed = s
        .post(SHOP, &format!("/v1/batches/{id}/seal"), None, &json!({}))
        .await;
    assert_eq!(
        (sealed.status, sealed.json()["state"].as_str()),
        (200, Some("sealed"))
    );
    let none_open = s.get(SHOP, "/v1/batches?state=open").await.json();
    assert_eq!(none_open["batches"], json!([]));
    let refused = s
        .post(SHOP, &path, None, &json!({"children": [child(4)]}))
        .await;
    assert_eq!(
        (refused.status, refused.problem()),
        (409, "conflict".to_string())
    );
    assert!(detail(&refused).contains("sealed"), "{refused:?}");
    let job = s.get(SHOP, &format!("/v1/jobs/{}", ids[0])).await.json();
    assert_eq!(job["batch_id"].as_i64(), Some(id));
}

/// A client principal sees and acts on its own batches only: another's are 404 to every
/// endpoint and unchanged; an operator sees them all.
async fn a_client_sees_and_adds_to_its_own_batches_only(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1)], "open": true});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let one = json!({"children": [child(2)]});
    for (path, body) in [
        (format!("/v1/batches/{id}/children"), Some(&one)),
        (format!("/v1/batches/{id}/seal"), None),
    ] {
        let a = s.post(MILL, &path, None, body.unwrap_or(&json!({}))).await;
        assert_eq!(
            (a.status, a.problem()),
            (404, "not_found".to_string()),
            "{path}"
        );
    }
    for path in [
        format!("/v1/batches/{id}"),
        format!("/v1/batches/{id}/children"),
    ] {
        assert_eq!(s.get(MILL, &path).await.status, 404, "{path}");
    }
    assert_eq!(
        s.get(MILL, "/v1/batches").await.json()["batches"],
        json!([])
    );
    let batch = s.idem.batch_get(id).await.unwrap().unwrap();
    assert_eq!((batch.total, batch.state.as_str()), (1, "open"));
    let all = s.get(OPS, "/v1/batches").await.json();
    assert_eq!(all["batches"][0]["id"].as_i64(), Some(id));
    assert_eq!(s.get(OPS, &format!("/v1/batches/{id}")).await.status, 200);
}

/// The same POST /v1/batches with the same Idempotency-Key creates one batch and replays
/// the first answer byte for byte; the key with another body is 422 and creates nothing.
async fn an_idempotent_create_makes_one_batch_and_replays_it(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1), child(2)]});
    let first = s.post(SHOP, "/v1/batches", Some("month-11"), &body).await;
    assert_eq!(
        (first.status, first.header("idempotent-replayed")),
        (201, Some("false"))
    );
    let again = s.post(SHOP, "/v1/batches", Some("month-11"), &body).await;
    assert_eq!(
        (again.status, again.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(again.body, first.body);
    let other = json!({"successor": successor(), "children": [child(3)]});
    let reused = s.post(SHOP, "/v1/batches", Some("month-11"), &other).await;
    assert_eq!(reused.status, 422, "{reused:?}");
    assert_eq!((batches(&s).await, s.job_count().await), (1, 2));
    let mill = s.post(MILL, "/v1/batches", Some("month-11"), &body).await;
    assert_eq!(
        mill.header("idempotent-replayed"),
        Some("false"),
        "keys are per principal"
    );
    assert_eq!(batches(&s).await, 2);
}

/// Children claimed and completed with results through the worker protocol finish the
/// batch; its successor appears once, follows the batch and is the creator's.
async fn a_batch_finishes_through_the_worker_protocol(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1), child(2)]});
    let created = create(&s, SHOP, body).await;
    let id = created["batch"]["id"].as_i64().unwrap();
    assert_eq!(created["batch"]["state"], "sealed");
    let claimed = claim(&s, SHOP, &["tally"], "w").await;
    assert_eq!(claimed.len(), 2);
    let running = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(running["states"]["running"], 2);
    for (n, job) in claimed.iter().enumerate() {
        complete(&s, job, json!({"total": n})).await;
    }
    let done = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(
        (done["state"].as_str(), done["completed"].as_i64()),
        (Some("finished"), Some(2))
    );
    assert_eq!(done["unfinished"], 0);
    let successor_id = done["successor_job_id"].as_i64().expect("a successor");
    let job = s
        .get(SHOP, &format!("/v1/jobs/{successor_id}"))
        .await
        .json();
    assert_eq!(
        (job["kind"].as_str(), job["follows_batch"].as_i64()),
        (Some("report"), Some(id))
    );
    assert_eq!(job["principal"], "shop");
    assert!(job.get("batch_id").is_none());
    let children = s
        .get(SHOP, &format!("/v1/batches/{id}/children"))
        .await
        .json();
    let results: Vec<&Value> = children["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| &j["result"])
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r.get("total").is_some()),
        "{children}"
    );
    let successors = claim(&s, SHOP, &["report"], "w").await;
    assert_eq!(successors.len(), 1, "one successor");
}

/// With `on_dead`, a dead child makes the failure successor run instead.
async fn a_dead_child_runs_the_failure_successor(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({
        "successor": successor(),
        "on_dead": {"kind": "apologise", "queue": "q"},
        "children": [child(1)],
    });
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let job = &claim(&s, SHOP, &["tally"], "w").await[0];
    let failed = s
        .post(
            SHOP,
            &format!("/v1/jobs/{}/fail", job["id"]),
            None,
            &json!({"fence": job["fence"], "error": "no such shop", "outcome": "permanent"}),
        )
        .await;
    assert_eq!(failed.json()["state"], "dead", "{failed:?}");
    let done = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(
        (done["state"].as_str(), done["dead"].as_i64()),
        (Some("finished"), Some(1))
    );
    assert_eq!(done["on_dead"], "failure_successor");
    let next = s
        .get(SHOP, &format!("/v1/jobs/{}", done["successor_job_id"]))
        .await
        .json();
    assert_eq!(next["kind"], "apologise");
}

/// The built-in `http` kind is for operators, as a child, a successor or a failure
/// successor, at creation and when adding; nothing is written.
async fn the_http_kind_is_refused_for_a_client(db: &TestDb) {
    let s = serve(db).await;
    let http = json!({"kind": "http", "args": {"url": "http://169.254.169.254/"}});
    for body in [
        json!({"successor": successor(), "children": [child(1), http]}),
        json!({"successor": http, "children": [child(1)]}),
        json!({"successor": successor(), "on_dead": http, "children": []}),
    ] {
        let a = s.post(SHOP, "/v1/batches", None, &body).await;
        assert_eq!(
            (a.status, a.problem()),
            (403, "operator_only".to_string()),
            "{body}"
        );
    }
    let refused = s
        .post(
            SHOP,
            "/v1/batches",
            None,
            &json!({"successor": successor(), "children": [child(1), http]}),
        )
        .await;
    assert!(detail(&refused).starts_with("children[1]: "), "{refused:?}");
    let body = json!({"successor": successor(), "children": [], "open": true});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let add = s
        .post(
            SHOP,
            &format!("/v1/batches/{id}/children"),
            None,
            &json!({"children": [http]}),
        )
        .await;
    assert_eq!(add.status, 403, "{add:?}");
    assert_eq!((batches(&s).await, s.job_count().await), (1, 0));
}

/// A successor with an enqueue key is 422, saying why; more than MAX_CHILDREN_PER_CALL
/// children is 422 naming the limit; that many children (of small args) fit in one
/// request, and a body over the server's limit is 413 naming it.
async fn the_limits_of_a_request_are_kept_and_named(db: &TestDb) {
    let s = serve(db).await;
    let mut keyed = successor();
    keyed["enqueue_key"] = json!("report-11");
    let a = s
        .post(
            SHOP,
            "/v1/batches",
            None,
            &json!({"successor": keyed, "children": []}),
        )
        .await;
    assert_eq!(a.status, 422, "{a:?}");
    assert!(detail(&a).contains("enqueue key"), "{a:?}");
    let small = json!({"kind": "t"});
    let too_many = vec![small.clone(); MAX_CHILDREN_PER_CALL + 1];
    let body = json!({"successor": successor(), "children": too_many, "open": true});
    let a = s.post(SHOP, "/v1/batches", None, &body).await;
    assert_eq!(a.status, 422, "{a:?}");
    assert!(detail(&a).contains(&MAX_CHILDREN_PER_CALL.to_string()));
    let body = json!({"successor": successor(), "children": [], "open": true});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let path = format!("/v1/batches/{id}/children");
    let a = s
        .post(SHOP, &path, None, &json!({"children": too_many}))
        .await;
    assert_eq!(a.status, 422, "{a:?}");
    assert_eq!(s.job_count().await, 0);
    let most: Vec<Value> = (0..MAX_CHILDREN_PER_CALL as i64)
        .map(|n| json!({"kind": "tally-shop", "args": {"shop": n}}))
        .collect();
    let body = serde_json::to_vec(&json!({"children": most})).unwrap();
    assert!(body.len() < 1 << 20, "{} bytes", body.len());
    let a = s.post_raw(SHOP, &path, None, &body).await;
    assert_eq!(
        a.status,
        200,
        "{}",
        String::from_utf8_lossy(&a.body[..a.body.len().min(500)])
    );
    assert_eq!(
        a.json()["batch"]["total"].as_i64(),
        Some(MAX_CHILDREN_PER_CALL as i64)
    );
    let big = json!({"kind": "tally-shop", "args": {"pad": "x".repeat(200)}});
    let body = serde_json::to_vec(&json!({"children": vec![big; 5000]})).unwrap();
    for key in [None, Some("big")] {
        let a = s.post_raw(SHOP, &path, key, &body).await;
        assert_eq!((a.status, a.problem()), (413, "body_too_large".to_string()));
        let detail = detail(&a);
        assert!(detail.contains(&(1 << 20).to_string()), "{detail}");
    }
}

/// Attack: malformed ids, pages and bodies are refused with a problem and change
/// nothing; unknown fields are refused, in bodies and queries alike.
async fn malformed_ids_pages_and_fields_are_refused(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1)], "open": true});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    for (path, status) in [
        ("/v1/batches/-1".to_string(), 404),
        ("/v1/batches/0/children".to_string(), 404),
        ("/v1/batches/9223372036854775807".to_string(), 404),
        ("/v1/batches/9223372036854775808".to_string(), 400),
        ("/v1/batches/1e3".to_string(), 400),
        ("/v1/batches?limit=0".to_string(), 422),
        ("/v1/batches?limit=501".to_string(), 422),
        ("/v1/batches?limit=99999999999".to_string(), 400),
        ("/v1/batches?state=done".to_string(), 422),
        ("/v1/batches?principal=mill".to_string(), 400),
        (format!("/v1/batches/{id}/children?limit=0"), 422),
        (format!("/v1/batches/{id}/children?after=x"), 400),
    ] {
        let a = s.get(SHOP, &path).await;
        assert_eq!(a.status, status, "{path}: {a:?}");
        assert!(!a.problem().is_empty());
    }
    for before in ["-9223372036854775808", "-1", "9223372036854775807"] {
        let a = s.get(SHOP, &format!("/v1/batches?before={before}")).await;
        assert_eq!(a.status, 200, "{before}: {a:?}");
    }
    let path = format!("/v1/batches/{id}/children");
    for body in [
        json!({"children": [child(2)], "seal": true}),
        json!({"children": [{"kind": "t", "batch_id": 1}]}),
        json!({"children": [{"kind": "t", "principal": "mill"}]}),
        json!({"children": []}),
        json!({"children": {"kind": "t"}}),
    ] {
        let a = s.post(SHOP, &path, None, &body).await;
        assert_eq!(
            (a.status, a.problem()),
            (422, "invalid_request".to_string()),
            "{body}"
        );
    }
    let unknown = json!({"successor": successor(), "children": [], "principal": "mill"});
    let a = s.post(SHOP, "/v1/batches", None, &unknown).await;
    assert_eq!(a.status, 422, "{a:?}");
    assert!(detail(&a).contains("unknown field"));
    assert_eq!((batches(&s).await, s.job_count().await), (1, 1));
}

/// Attack: a job taking the enqueue key of a batch's successor (`batch:{id}:done`) in its
/// queue, by a client or as a child, does not become the successor: a client's keys live
/// in its namespace. Children's keys do not meet another principal's either.
async fn a_client_cannot_take_a_successors_key(db: &TestDb) {
    let s = serve(db).await;
    let body = json!({"successor": successor(), "children": [child(1)]});
    let id = create(&s, SHOP, body).await["batch"]["id"]
        .as_i64()
        .unwrap();
    let key = format!("batch:{id}:done");
    let squat = json!({"kind": "report", "queue": "q", "enqueue_key": key});
    let squatter = s.post(SHOP, "/v1/jobs", None, &squat).await.json()["job"]["id"].as_i64();
    let mut child = json!({"kind": "tally", "queue": "q", "enqueue_key": key});
    let other = json!({"successor": successor(), "children": [child.clone()]});
    let mill_child = create(&s, MILL, other).await;
    assert_eq!(
        mill_child["children"][0]["deduplicated"], false,
        "{mill_child}"
    );
    child["enqueue_key"] = json!("order-1");
    let mine = create(
        &s,
        SHOP,
        json!({"successor": successor(), "children": [child.clone()]}),
    )
    .await;
    let theirs = create(
        &s,
        MILL,
        json!({"successor": successor(), "children": [child]}),
    )
    .await;
    assert_ne!(child_ids(&mine), child_ids(&theirs));
    let job = claim(&s, SHOP, &["tally"], "w")
        .await
        .into_iter()
        .find(|j| j["batch_id"] == id)
        .unwrap();
    complete(&s, &job, json!(null)).await;
    let done = s.get(SHOP, &format!("/v1/batches/{id}")).await.json();
    let successor_id = done["successor_job_id"].as_i64();
    assert!(successor_id.is_some() && successor_id != squatter, "{done}");
    let job = s
        .get(SHOP, &format!("/v1/jobs/{}", successor_id.unwrap()))
        .await
        .json();
    assert_eq!(job["follows_batch"].as_i64(), Some(id));
}

idem_store_tests::store_cases!(
    a_batch_is_created_added_to_read_and_sealed,
    a_client_sees_and_adds_to_its_own_batches_only,
    an_idempotent_create_makes_one_batch_and_replays_it,
    a_batch_finishes_through_the_worker_protocol,
    a_dead_child_runs_the_failure_successor,
    the_http_kind_is_refused_for_a_client,
    the_limits_of_a_request_are_kept_and_named,
    malformed_ids_pages_and_fields_are_refused,
    a_client_cannot_take_a_successors_key,
);
