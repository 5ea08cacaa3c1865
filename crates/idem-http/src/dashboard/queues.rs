//! The queues page (`/`): per queue, jobs by state, how long the oldest due job has
//! waited, sparklines of throughput and latency over the last ten minutes, and whether
//! it is paused, with the button that pauses or resumes it (claims stop while paused;
//! enqueues go on).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use idem_store::{JobState, PausedQueue};
use maud::{Markup, html};
use serde::Deserialize;

use super::DashState;
use super::csrf::{Action, csrf_field};
use super::layout::{self, Ctx, duration_ms, refusal};
use super::stats::{self, Counts, counts_ttl, points, sparkline};

/// `GET /`.
pub async fn page(State(state): State<DashState>, ctx: Ctx) -> Response {
    let read = async {
        let counts = state.stats.counts(&state.idem).await?;
        // The paused queues are a few rows, read on every refresh so a pause shows at once.
        let paused = state.idem.paused_queues().await?;
        Ok::<_, idem::IdemError>((counts, paused))
    };
    let live = match read.await {
        Ok((counts, paused)) => table(&ctx, &counts, &paused, &state.stats.samples()),
        Err(e) => html! { p.notice.error { "The counts could not be read: " (e) } },
    };
    layout::page(&ctx, "/", "Queues", html! {}, Some(live))
}

/// The pause and resume form.
#[derive(Deserialize)]
pub struct PauseForm {
    csrf: String,
    queue: String,
    pause: bool,
}

/// `POST /queues/pause`: pauses (`pause=true`) or resumes a queue, then shows the queues.
pub async fn pause(State(state): State<DashState>, action: Action<PauseForm>) -> Response {
    let f = action.form;
    let done = match f.pause {
        true => {
            let by = action.session.principal.name();
            state.idem.pause_queue(&f.queue, Some(by)).await
        }
        false => state.idem.resume_queue(&f.queue).await,
    };
    match done {
        Ok(_) => Redirect::to("/").into_response(),
        Err(e) => refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("Not changed: {e}"),
        ),
    }
}

/// Per queue: counts by state (paused queues without jobs included).
fn by_queue<'a>(counts: &'a Counts, paused: &'a [PausedQueue]) -> BTreeMap<&'a str, [i64; 7]> {
    let mut queues: BTreeMap<&str, [i64; 7]> = BTreeMap::new();
    for c in &counts.counts {
        let i = JobState::ALL
            .iter()
            .position(|s| *s == c.state)
            .unwrap_or(0);
        queues.entry(c.queue.as_str()).or_default()[i] += c.count;
    }
    for w in &counts.waiting {
        queues.entry(w.queue.as_str()).or_default();
    }
    for p in paused {
        queues.entry(p.queue.as_str()).or_default();
    }
    queues
}

fn table(ctx: &Ctx, counts: &Counts, paused: &[PausedQueue], samples: &[stats::Sample]) -> Markup {
    let queues = by_queue(counts, paused);
    html! {
        @if queues.is_empty() {
            p.empty { "No jobs yet." }
        } @else {
            table.grid {
                thead { tr {
                    th { "queue" }
                    @for s in JobState::ALL { th.num { (s.as_str()) } }
                    th { "oldest due waits" }
                    th { "finished/s" }
                    th { "mean run time" }
                    th { "claims" }
                }}
                tbody {
                    @for (queue, row) in &queues {
                        @let held = paused.iter().find(|p| p.queue == *queue);
                        (queue_row(queue, row, counts, samples, pause_cell(ctx, queue, held)))
                    }
                }
            }
        }
        p.meta data-read-at=(counts.now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)) {
            "Counts read at " (super::layout::time(counts.now)) " in " (duration_ms(counts.took.as_millis() as i64))
            "; read again at most every " (counts_ttl(counts.took).as_secs()) " s for all browsers together. "
            "Sparklines: one point per " (stats::SAMPLE_EVERY.as_secs()) " s, last "
            (stats::SAMPLES * stats::SAMPLE_EVERY.as_secs() as usize / 60) " minutes."
        }
    }
}

/// The queue's pause state and the button that changes it.
fn pause_cell(ctx: &Ctx, queue: &str, paused: Option<&PausedQueue>) -> Markup {
    html! {
        form.inline method="post" action="/queues/pause" {
            input type="hidden" name="csrf" value=(ctx.session.csrf);
            input type="hidden" name="queue" value=(queue);
            @if let Some(p) = paused {
                span.badge.paused title={ "since " (layout::time(p.paused_at)) " by " (p.paused_by.as_deref().unwrap_or("?")) } { "paused" }
                " "
                input type="hidden" name="pause" value="false";
                button.resume type="submit" { "Resume" }
            } @else {
                input type="hidden" name="pause" value="true";
                button.pause type="submit" { "Pause" }
            }
        }
    }
}

fn queue_row(
    queue: &str,
    row: &[i64; 7],
    counts: &Counts,
    samples: &[stats::Sample],
    pause: Markup,
) -> Markup {
    let oldest = counts
        .waiting
        .iter()
        .filter(|w| w.queue == queue && w.oldest_run_at <= counts.now)
        .map(|w| (counts.now - w.oldest_run_at).num_milliseconds())
        .max();
    let pts = points(samples, queue);
    let rates: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let runs: Vec<f64> = pts.iter().map(|p| p.1.unwrap_or(0.0)).collect();
    let last_rate = rates.last().copied().unwrap_or(0.0);
    let last_run = pts.iter().rev().find_map(|p| p.1);
    html! {
        tr {
            td { a href={ "/jobs?queue=" (urlencode(queue)) } { (queue) } }
            @for (i, s) in JobState::ALL.iter().enumerate() {
                td.num {
                    @if row[i] > 0 {
                        a href={ "/jobs?queue=" (urlencode(queue)) "&state=" (s.as_str()) } { (row[i]) }
                    } @else { span.zero { "0" } }
                }
            }
            td { @match oldest { Some(ms) => (duration_ms(ms)), None => "–" } }
            td.spark { (sparkline(&rates, "jobs finished per second")) span.last { (format!("{last_rate:.1}")) } }
            td.spark {
                (sparkline(&runs, "mean run time (ms)"))
                span.last { @match last_run { Some(ms) => (duration_ms(ms as i64)), None => "–" } }
            }
            td.pause { (pause) }
        }
    }
}

/// `s` for a query string.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

csrf_field!(PauseForm);
