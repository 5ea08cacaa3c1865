//! Dead letters (`/dead`): dead jobs by queue and kind, and bulk retry or discard.
//!
//! What must stay true: a bulk action acts only on the jobs its preview listed. The
//! preview (`/dead/preview`) reads at most [`BULK_CAP`] matching ids, shows their count
//! and every id, and its confirmation form carries exactly those ids; the action
//! (`POST /dead/bulk`) takes its ids from the form, never from the filter again, so a
//! job that died after the preview is left alone, and one that left `dead` meanwhile is
//! skipped by the engine (retry and discard change dead jobs only).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use idem_store::JobState;
use maud::{Markup, html};
use serde::Deserialize;

use super::DashState;
use super::csrf::{Action, csrf_field};
use super::jobs::{Filter, filters, table};
use super::layout::{self, Ctx, refusal};
use super::queues::urlencode;

/// The most jobs one bulk action takes; a larger match is done in several.
pub const BULK_CAP: u32 = 1000;

/// `GET /dead`.
pub async fn page(State(state): State<DashState>, ctx: Ctx, Query(f): Query<Filter>) -> Response {
    let live = match state.idem.jobs(f.list(Some(JobState::Dead))).await {
        Ok(rows) => table(&rows, &f, "/dead"),
        Err(e) => html! { p.notice.error { "The dead jobs could not be read: " (e) } },
    };
    let fixed = html! {
        (filters(&f, false))
        div.actions {
            @for (action, label) in [("retry", "Retry all matching…"), ("discard", "Discard all matching…")] {
                a.button href={ "/dead/preview?action=" (action) "&queue=" (urlencode(&f.queue)) "&kind=" (urlencode(&f.kind)) } { (label) }
            }
        }
    };
    layout::page(&ctx, "/dead", "Dead letters", fixed, Some(live))
}

/// A bulk action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bulk {
    /// Retry the listed dead jobs.
    Retry,
    /// Discard the listed dead jobs.
    Discard,
}

impl Bulk {
    fn as_str(self) -> &'static str {
        match self {
            Bulk::Retry => "retry",
            Bulk::Discard => "discard",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Bulk::Retry => "Retry",
            Bulk::Discard => "Discard",
        }
    }
}

/// The preview's query.
#[derive(Deserialize)]
pub struct Preview {
    action: Bulk,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    kind: String,
}

/// `GET /dead/preview`: the count and ids the action would take, and its confirmation.
pub async fn preview(
    State(state): State<DashState>,
    ctx: Ctx,
    Query(p): Query<Preview>,
) -> Response {
    let filter = Filter {
        queue: p.queue.clone(),
        kind: p.kind.clone(),
        ..Filter::default()
    };
    let mut list = filter.list(Some(JobState::Dead));
    list.limit = BULK_CAP + 1;
    let rows = match state.idem.jobs(list).await {
        Ok(rows) => rows,
        Err(e) => return refusal(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let more = rows.len() > BULK_CAP as usize;
    let ids: Vec<i64> = rows.iter().take(BULK_CAP as usize).map(|j| j.id).collect();
    let body = confirmation(&ctx, p.action, &p, &ids, more);
    layout::page(
        &ctx,
        "/dead",
        &format!("{} dead jobs", p.action.as_str()),
        body,
        None,
    )
}

fn confirmation(ctx: &Ctx, action: Bulk, p: &Preview, ids: &[i64], more: bool) -> Markup {
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    html! {
        @if ids.is_empty() {
            p.empty { "No dead job matches." }
            p { a href="/dead" { "Back" } }
        } @else {
            p.confirm {
                (action.label()) " " strong #preview-count { (ids.len()) } " dead jobs"
                @if !p.queue.is_empty() { " of queue " code { (p.queue) } }
                @if !p.kind.is_empty() { " of kind " code { (p.kind) } }
                "? Only these jobs are acted on; jobs that die after this preview are not."
            }
            @if more { p.notice { "More than " (BULK_CAP) " match: this takes the newest " (BULK_CAP) "; preview again for the rest." } }
            p.ids #preview-ids { (joined.join(", ")) }
            form.confirm method="post" action="/dead/bulk" {
                input type="hidden" name="csrf" value=(ctx.session.csrf);
                input type="hidden" name="action" value=(action.as_str());
                input type="hidden" name="ids" value=(joined.join(","));
                button #confirm type="submit" { "Confirm: " (action.as_str()) " these " (ids.len()) " jobs" }
                " " a href="/dead" { "Back" }
            }
        }
    }
}

/// The confirmed bulk action's form.
#[derive(Deserialize)]
pub struct BulkForm {
    csrf: String,
    action: Bulk,
    ids: String,
}

/// `POST /dead/bulk`: the action on the previewed ids, and what it did.
pub async fn bulk(State(state): State<DashState>, ctx: Ctx, action: Action<BulkForm>) -> Response {
    let form = action.form;
    let ids: Result<Vec<i64>, _> = form
        .ids
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<i64>())
        .collect();
    let ids = match ids {
        Ok(ids) if !ids.is_empty() && ids.len() <= BULK_CAP as usize => ids,
        _ => {
            return refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("The form must list 1 to {BULK_CAP} job ids; nothing was changed."),
            );
        }
    };
    let done = match form.action {
        Bulk::Retry => state.idem.retry_jobs(ids.clone()).await.map(|r| r.len()),
        Bulk::Discard => state.idem.discard_jobs(ids.clone()).await.map(|r| r.len()),
    };
    let body = match done {
        Ok(n) => html! {
            p.notice.ok #bulk-done { (form.action.as_str()) ": " (n) " of " (ids.len()) " previewed jobs" }
            @if n < ids.len() { p { (ids.len() - n) " were no longer dead and were left alone." } }
            p { a href="/dead" { "Back to dead letters" } }
        },
        Err(e) => html! {
            p.notice.error { (form.action.as_str()) " refused, nothing changed: " (e) }
            p { a href="/dead" { "Back to dead letters" } }
        },
    };
    layout::page(&ctx, "/dead", "Dead letters", body, None)
}

csrf_field!(BulkForm);
