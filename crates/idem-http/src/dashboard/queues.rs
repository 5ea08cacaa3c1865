//! The queues page (`/`): per queue, jobs by state, how long the oldest due job has
//! waited, and sparklines of throughput and latency over the last ten minutes.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use idem_store::JobState;
use maud::{Markup, html};

use super::DashState;
use super::layout::{self, Ctx, duration_ms};
use super::stats::{self, Counts, counts_ttl, points, sparkline};

/// `GET /`.
pub async fn page(State(state): State<DashState>, ctx: Ctx) -> Response {
    let live = match state.stats.counts(&state.idem).await {
        Ok(counts) => table(&counts, &state.stats.samples()),
        Err(e) => html! { p.notice.error { "The counts could not be read: " (e) } },
    };
    layout::page(&ctx, "/", "Queues", html! {}, Some(live))
}

/// Per queue: counts by state.
fn by_queue(counts: &Counts) -> BTreeMap<&str, [i64; 7]> {
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
    queues
}

fn table(counts: &Counts, samples: &[stats::Sample]) -> Markup {
    let queues = by_queue(counts);
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
                }}
                tbody {
                    @for (queue, row) in &queues {
                        (queue_row(queue, row, counts, samples))
                    }
                }
            }
        }
        p.meta {
            "Counts read at " (super::layout::time(counts.now)) " in " (duration_ms(counts.took.as_millis() as i64))
            "; read again at most every " (counts_ttl(counts.took).as_secs()) " s for all browsers together. "
            "Sparklines: one point per " (stats::SAMPLE_EVERY.as_secs()) " s, last "
            (stats::SAMPLES * stats::SAMPLE_EVERY.as_secs() as usize / 60) " minutes."
        }
    }
}

fn queue_row(queue: &str, row: &[i64; 7], counts: &Counts, samples: &[stats::Sample]) -> Markup {
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
