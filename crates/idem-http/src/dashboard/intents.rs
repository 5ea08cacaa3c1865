//! Intents (`/intents`): the reconciliation queue (unknown, duplicate, manual) with the
//! operator's resolutions, calls in progress with their lease counting down, or every
//! intent; keyset paging by key.
//!
//! The resolutions are the API's (`POST /v1/intents/{key}/resolve`): an `unknown` or
//! `manual` intent is settled *applied* (completed) or *absent* (released, so the call is
//! sent again), and its dead job is put back to run ([`idem::Idem::resolve_intent`]).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use idem_store::{IntentList, IntentResolution, IntentRow, IntentState, Timestamp};
use maud::{Markup, html};
use serde::Deserialize;

use super::DashState;
use super::csrf::{Action, csrf_field};
use super::layout::{self, Ctx, badge, countdown, refusal, time};
use super::queues::urlencode;

/// Rows per page.
const PAGE: u32 = 50;

/// The views: (query value, label, states).
const VIEWS: [(&str, &str, &[IntentState]); 3] = [
    (
        "attention",
        "Need attention",
        &[
            IntentState::Unknown,
            IntentState::Duplicate,
            IntentState::Manual,
        ],
    ),
    ("in_progress", "In progress", &[IntentState::InProgress]),
    ("all", "All", &[]),
];

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct View {
    #[serde(default)]
    state: String,
    /// Keys after this one.
    after: Option<String>,
    /// Only this key.
    key: Option<String>,
}

/// `GET /intents`.
pub async fn page(State(state): State<DashState>, ctx: Ctx, Query(v): Query<View>) -> Response {
    let view = VIEWS
        .iter()
        .find(|(name, _, _)| *name == v.state)
        .unwrap_or(&VIEWS[0]);
    let live = match read(&state, &v, view.2).await {
        Ok((rows, now)) => table(&ctx, &rows, view.0, now),
        Err(e) => html! { p.notice.error { "The intents could not be read: " (e) } },
    };
    let fixed = html! {
        div.tabs { @for (name, label, _) in VIEWS {
            a.active[name == view.0] href={ "/intents?state=" (name) } { (label) }
        }}
    };
    layout::page(&ctx, "/intents", "Intents", fixed, Some(live))
}

async fn read(
    state: &DashState,
    v: &View,
    states: &[IntentState],
) -> Result<(Vec<IntentRow>, Timestamp), idem::IdemError> {
    let now = state.idem.now().await?;
    if let Some(key) = &v.key {
        return Ok((state.idem.intent(key).await?.into_iter().collect(), now));
    }
    let params = IntentList {
        states: states.to_vec(),
        after: v.after.clone(),
        limit: PAGE + 1,
        ..IntentList::default()
    };
    Ok((state.idem.intents(params).await?, now))
}

fn table(ctx: &Ctx, rows: &[IntentRow], view: &str, now: Timestamp) -> Markup {
    let shown = &rows[..rows.len().min(PAGE as usize)];
    html! {
        @if shown.is_empty() { p.empty { "No intent here." } } @else {
            table.grid {
                thead { tr {
                    th { "key" } th { "state" } th { "remote" } th.num { "fence" } th.num { "attempt" }
                    th { "job" } th { "lease ends in" } th { "error / remote ids" } th { "updated" } th { "resolve" }
                }}
                tbody { @for i in shown { tr {
                    td { code { (i.key) } }
                    td { (badge(i.state.as_str())) }
                    td { @if i.unkeyed { "unkeyed" } @else { "keyed" } }
                    td.num { (i.fence) }
                    td.num { (i.attempt) }
                    td { a href={ "/jobs/" (i.job_id) } { (i.job_id) } " (fence " (i.job_fence) ")" }
                    td { (countdown(now, i.lease_expires_at)) }
                    td.error { (i.error.as_deref().unwrap_or("")) @if !i.remote_refs.is_empty() { br; (i.remote_refs.join(", ")) } }
                    td { (time(i.updated_at)) }
                    td { (resolve_forms(ctx, i)) }
                }}}
            }
        }
        @if rows.len() > PAGE as usize && let Some(last) = shown.last() {
            p.pager { a href={ "/intents?state=" (view) "&after=" (urlencode(&last.key)) } { "Next →" } }
        }
    }
}

fn resolve_forms(ctx: &Ctx, i: &IntentRow) -> Markup {
    let settles = i.state.awaits_settlement();
    html! {
        @if settles {
            @for (resolution, label) in [("applied", "Applied"), ("absent", "Absent: send again")] {
                form.inline method="post" action="/intents/resolve" {
                    input type="hidden" name="csrf" value=(ctx.session.csrf);
                    input type="hidden" name="key" value=(i.key);
                    input type="hidden" name="resolution" value=(resolution);
                    button type="submit" { (label) }
                }
            }
        }
    }
}

/// The resolution form.
#[derive(Deserialize)]
pub struct Resolve {
    csrf: String,
    key: String,
    resolution: String,
}

/// `POST /intents/resolve`: settles an unknown or manual intent by hand.
pub async fn resolve(State(state): State<DashState>, action: Action<Resolve>) -> Response {
    let f = action.form;
    let resolution = match f.resolution.as_str() {
        "applied" => IntentResolution::Applied {
            result: serde_json::json!({"resolved_by": action.session.principal.name()}),
            remote_refs: Vec::new(),
        },
        "absent" => IntentResolution::Absent,
        other => {
            return refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("Unknown resolution {other:?}; use applied or absent. Nothing changed."),
            );
        }
    };
    match state.idem.resolve_intent(&f.key, resolution).await {
        Ok(_) => {
            Redirect::to(&format!("/intents?state=all&key={}", urlencode(&f.key))).into_response()
        }
        Err(e) => refusal(StatusCode::CONFLICT, &format!("Not resolved: {e}")),
    }
}

csrf_field!(Resolve);
