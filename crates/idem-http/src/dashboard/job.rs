//! One job (`/jobs/{id}`): its args pretty-printed, every attempt with its fence,
//! outcome, error, times and duration, the effect keys and intents it produced, its
//! batch and chain, and the lease with a countdown while it runs; and its actions
//! (retry, cancel, discard), each behind a confirmation page.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use idem_store::{AttemptRow, EffectList, EffectRecord, IntentList, IntentRow, JobRow, JobState};
use maud::{Markup, html};
use serde::Deserialize;

use super::DashState;
use super::csrf::{Action, csrf_field};
use super::layout::{self, Ctx, badge, countdown, duration_ms, maybe_time, refusal, time};

/// Effect keys and intents shown per job.
const SHOWN: u32 = 200;

/// `GET /jobs/{id}`.
pub async fn page(State(state): State<DashState>, ctx: Ctx, Path(id): Path<String>) -> Response {
    let job = match found(&state, &id).await {
        Ok(job) => job,
        Err(r) => return r,
    };
    let title = format!("Job {} · {}", job.id, job.kind);
    let live = match details(&state, &ctx, job).await {
        Ok(m) => m,
        Err(e) => html! { p.notice.error { "The job could not be read: " (e) } },
    };
    layout::page(&ctx, "/jobs", &title, html! {}, Some(live))
}

/// The job `id` names, or the page that says it does not exist.
async fn found(state: &DashState, id: &str) -> Result<JobRow, Response> {
    let missing = || refusal(StatusCode::NOT_FOUND, &format!("There is no job {id}."));
    let Ok(id) = id.parse::<i64>() else {
        return Err(missing());
    };
    match state.idem.job(id).await {
        Ok(Some(job)) => Ok(job),
        Ok(None) => Err(missing()),
        Err(e) => Err(refusal(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
    }
}

async fn details(state: &DashState, ctx: &Ctx, job: JobRow) -> Result<Markup, idem::IdemError> {
    let attempts = state.idem.attempts(job.id).await?;
    let effects = state
        .idem
        .store()
        .effect_list(EffectList {
            job_id: job.id,
            limit: SHOWN,
        })
        .await?;
    let intents = state
        .idem
        .intents(IntentList {
            job_id: Some(job.id),
            limit: SHOWN,
            ..IntentList::default()
        })
        .await?;
    let now = state.idem.now().await?;
    Ok(html! {
        (actions(ctx, &job))
        (summary(&job, now))
        h2 { "Args" }
        pre.json { (pretty(&job.args)) }
        @if let Some(result) = &job.result { h2 { "Result" } pre.json { (pretty(result)) } }
        @if let Some(e) = &job.last_error {
            h2 { @if job.state == JobState::Completed { "Error of an earlier attempt" } @else { "Last error" } }
            pre.error { (e) }
        }
        (attempt_table(&attempts))
        (effect_table(&effects))
        (intent_table(&intents, now))
    })
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn summary(job: &JobRow, now: idem_store::Timestamp) -> Markup {
    html! {
        dl.summary {
            dt { "state" } dd { (badge(job.state.as_str())) }
            dt { "kind" } dd { (job.kind) }
            dt { "queue" } dd { a href={ "/jobs?queue=" (super::queues::urlencode(&job.queue)) } { (job.queue) } }
            dt { "attempt" } dd { (job.attempt) " of " (job.max_attempts) }
            dt { "fence" } dd { (job.fence) }
            dt { "priority" } dd { (job.priority) }
            dt { "run at" } dd { (time(job.run_at)) }
            dt { "created" } dd { (time(job.created_at)) }
            dt { "attempted" } dd { (maybe_time(job.attempted_at)) }
            dt { "finalized" } dd { (maybe_time(job.finalized_at)) }
            @if job.state == JobState::Running {
                dt { "worker" } dd { (job.lease_owner.as_deref().unwrap_or("–")) }
                dt { "lease ends in" } dd { (countdown(now, job.lease_expires_at)) }
            }
            dt { "enqueue key" } dd { (job.enqueue_key.as_deref().unwrap_or("–")) }
            dt { "principal" } dd { (job.principal.as_deref().unwrap_or("–")) }
            @if let Some(b) = job.batch_id { dt { "batch" } dd { a href={ "/batches?id=" (b) } { "batch " (b) } } }
            @if let Some(j) = job.follows_job { dt { "follows job" } dd { a href={ "/jobs/" (j) } { (j) } } }
            @if let Some(b) = job.follows_batch { dt { "successor of batch" } dd { (b) } }
        }
    }
}

fn attempt_table(attempts: &[AttemptRow]) -> Markup {
    html! {
        h2 { "Attempts" }
        @if attempts.is_empty() { p.empty { "No finished attempt yet." } } @else {
            table.grid {
                thead { tr { th.num { "#" } th.num { "fence" } th { "outcome" } th { "started" } th { "finished" } th { "duration" } th { "error" } } }
                tbody { @for a in attempts { tr {
                    td.num { (a.attempt) }
                    td.num { (a.fence) }
                    td { (badge(a.outcome.as_str())) }
                    td { (maybe_time(a.started_at)) }
                    td { (time(a.finished_at)) }
                    td { @match a.started_at { Some(s) => (duration_ms((a.finished_at - s).num_milliseconds())), None => "–" } }
                    td.error { pre { (a.error.as_deref().unwrap_or("")) } }
                }}}
            }
        }
    }
}

fn effect_table(effects: &[EffectRecord]) -> Markup {
    html! {
        h2 { "Effect keys" }
        @if effects.is_empty() { p.empty { "No effect key recorded." } } @else {
            table.grid {
                thead { tr { th { "key" } th.num { "fence" } th { "recorded" } } }
                tbody { @for e in effects { tr { td { code { (e.key) } } td.num { (e.fence) } td { (time(e.created_at)) } } } }
            }
        }
    }
}

fn intent_table(intents: &[IntentRow], now: idem_store::Timestamp) -> Markup {
    html! {
        h2 { "Intents" }
        @if intents.is_empty() { p.empty { "No intent." } } @else {
            table.grid {
                thead { tr { th { "key" } th { "state" } th.num { "fence" } th { "lease ends in" } th { "error" } } }
                tbody { @for i in intents { tr {
                    td { a href={ "/intents?state=all&key=" (super::queues::urlencode(&i.key)) } { code { (i.key) } } }
                    td { (badge(i.state.as_str())) }
                    td.num { (i.fence) }
                    td { (countdown(now, i.lease_expires_at)) }
                    td.error { (i.error.as_deref().unwrap_or("")) }
                }}}
            }
        }
    }
}

/// The actions this job's state allows, each a link to its confirmation.
fn actions(ctx: &Ctx, job: &JobRow) -> Markup {
    let _ = ctx;
    let can = |a: JobAction| a.allowed(job.state);
    html! {
        div.actions {
            @for a in [JobAction::Retry, JobAction::Cancel, JobAction::Discard] {
                @if can(a) {
                    a.button href={ "/jobs/" (job.id) "/confirm?action=" (a.as_str()) } { (a.label()) "…" }
                }
            }
        }
    }
}

/// An action on one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobAction {
    /// Back to `available` with a fresh ladder (dead or cancelled jobs).
    Retry,
    /// Cancel an unfinished job.
    Cancel,
    /// Delete a dead job with its history.
    Discard,
}

impl JobAction {
    fn as_str(self) -> &'static str {
        match self {
            JobAction::Retry => "retry",
            JobAction::Cancel => "cancel",
            JobAction::Discard => "discard",
        }
    }

    fn label(self) -> &'static str {
        match self {
            JobAction::Retry => "Retry",
            JobAction::Cancel => "Cancel",
            JobAction::Discard => "Discard",
        }
    }

    fn allowed(self, state: JobState) -> bool {
        match self {
            JobAction::Retry => matches!(state, JobState::Dead | JobState::Cancelled),
            JobAction::Cancel => !state.is_finished(),
            JobAction::Discard => state == JobState::Dead,
        }
    }
}

/// The confirmation's query.
#[derive(Deserialize)]
pub struct Confirm {
    action: JobAction,
}

/// `GET /jobs/{id}/confirm?action=…`: what the action will do, and the button that does it.
pub async fn confirm(
    State(state): State<DashState>,
    ctx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<Confirm>,
) -> Response {
    let job = match found(&state, &id).await {
        Ok(job) => job,
        Err(r) => return r,
    };
    let a = q.action;
    let body = html! {
        p.confirm { (a.label()) " job " (job.id) " (" (job.kind) " in " (job.queue) ", now " (badge(job.state.as_str())) ")?" }
        @if a == JobAction::Discard { p { "Its attempt history and enqueue key are deleted with it." } }
        form.confirm method="post" action={ "/jobs/" (job.id) "/action" } {
            input type="hidden" name="csrf" value=(ctx.session.csrf);
            input type="hidden" name="action" value=(a.as_str());
            button #confirm type="submit" { "Confirm: " (a.label()) }
            " " a href={ "/jobs/" (job.id) } { "Back" }
        }
    };
    layout::page(
        &ctx,
        "/jobs",
        &format!("{} job {}", a.label(), job.id),
        body,
        None,
    )
}

/// An action's form.
#[derive(Deserialize)]
pub struct ActForm {
    csrf: String,
    action: JobAction,
}

/// `POST /jobs/{id}/action`: does the confirmed action, then shows the job.
pub async fn act(
    State(state): State<DashState>,
    Path(id): Path<String>,
    action: Action<ActForm>,
) -> Response {
    let job = match found(&state, &id).await {
        Ok(job) => job,
        Err(r) => return r,
    };
    let done = match action.form.action {
        JobAction::Retry => state
            .idem
            .retry_jobs(vec![job.id])
            .await
            .map(|r| !r.is_empty()),
        JobAction::Cancel => state.idem.cancel(job.id).await.map(|_| true),
        JobAction::Discard => state
            .idem
            .discard_jobs(vec![job.id])
            .await
            .map(|r| !r.is_empty()),
    };
    let verb = action.form.action.as_str();
    match done {
        Ok(true) if action.form.action == JobAction::Discard => {
            Redirect::to("/dead").into_response()
        }
        Ok(true) => Redirect::to(&format!("/jobs/{}", job.id)).into_response(),
        Ok(false) => refusal(
            StatusCode::CONFLICT,
            &format!("Job {} is {}; {verb} changed nothing.", job.id, job.state),
        ),
        Err(e) => refusal(StatusCode::CONFLICT, &format!("{verb} refused: {e}")),
    }
}

csrf_field!(ActForm);
