//! `GET /openapi.json`: the OpenAPI document, generated from the handlers' annotations
//! and the request and response types, so it describes what the server does.

use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::{batches, intents, jobs, operator, queues, view, worker};
use crate::problem::Problem;

/// The API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Durable background jobs whose effects happen once: \
        enqueue with Idempotency-Key, batches with a successor, claim with fences, intents \
        for remote effects."),
    paths(
        jobs::enqueue, jobs::get, jobs::list, jobs::retry, jobs::cancel,
        batches::create, batches::add, batches::seal, batches::list, batches::get,
        batches::children,
        worker::claim, worker::heartbeat, worker::complete, worker::fail,
        intents::begin, intents::renew, intents::complete, intents::fail, intents::unknown,
        intents::release, intents::list, intents::get, intents::resolve,
        queues::queues, queues::pause, queues::resume, queues::healthz,
        operator::attempts, operator::discard, operator::reconcile, operator::purge,
        operator::ledger_verify, operator::ledger_repair,
    ),
    components(schemas(Problem, view::JobView, view::EnqueuedView, view::JobPage,
        view::IntentView, view::QueueCountView, view::BatchView, view::BatchAddedView,
        view::BatchPage, view::SuccessorView)),
    modifiers(&Bearer, &Problems),
)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The problems the layers and extractors answer for every operation they apply to,
/// added to each operation that does not list the status already (its own description
/// stays): the request limits (503), authentication on `/v1` (401), a malformed path,
/// query, body or Idempotency-Key (400), an unknown or invisible record (404), a body
/// too large (413), not JSON (415) or of the wrong shape (422), and the Idempotency-Key
/// layer on every `/v1` POST (409 in flight, 422 reused for another request).
struct Problems;

impl Modify for Problems {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let v1 = path.starts_with("/v1/");
            let posts = item.post.iter_mut().map(|op| (op, true));
            let gets = item.get.iter_mut().map(|op| (op, false));
            for (op, post) in posts.chain(gets) {
                // By the template, not by each parameter's `in`: a query parameter
                // documented `in: path` still makes a query.
                let in_path = path.contains('{');
                let in_query = op.parameters.iter().flatten().any(|p| {
                    p.parameter_in == ParameterIn::Query
                        || (p.parameter_in == ParameterIn::Path
                            && !path.contains(&format!("{{{}}}", p.name)))
                });
                let body = op.request_body.is_some();
                let keyed = v1 && post;
                let mut add = |status: &str, description: &str| {
                    op.responses
                        .responses
                        .entry(status.to_string())
                        .or_insert_with(|| problem(description).into());
                };
                add(
                    "503",
                    "overloaded, timed out, or the store is unavailable; repeat after Retry-After",
                );
                if v1 {
                    add(
                        "401",
                        "unauthorized: no bearer token, or one no principal has",
                    );
                }
                if in_path || in_query || body || keyed {
                    add(
                        "400",
                        "a malformed path, query, JSON body or Idempotency-Key",
                    );
                }
                if in_path {
                    add("404", "not found, or not visible to this principal");
                }
                if body || keyed {
                    add("413", "the request body is too large");
                }
                if body {
                    add("415", "the body is not `application/json`");
                }
                if body || in_query || keyed {
                    add(
                        "422",
                        "invalid request, or an Idempotency-Key reused for another request",
                    );
                }
                if keyed {
                    add(
                        "409",
                        "a request with this Idempotency-Key is still in flight",
                    );
                }
            }
        }
    }
}

fn problem(description: &str) -> utoipa::openapi::Response {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("Problem")))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content("application/problem+json", content)
        .build()
}

/// The handler.
pub async fn document() -> Response {
    axum::Json(ApiDoc::openapi()).into_response()
}
