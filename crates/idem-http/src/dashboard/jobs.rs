//! The jobs page (`/jobs`): jobs newest first, filtered by queue, kind and state, a page
//! at a time with keyset paging (`after` = the last id shown), which reads one index
//! range per page however many rows the table holds.

use axum::extract::{Query, State};
use axum::response::Response;
use idem_store::{JobList, JobRow, JobState};
use maud::{Markup, html};
use serde::Deserialize;

use super::DashState;
use super::layout::{self, Ctx, badge, time};
use super::queues::urlencode;

/// Rows per page.
pub const PAGE: u32 = 50;

/// The filters and the page.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    /// Only this queue.
    #[serde(default)]
    pub queue: String,
    /// Only this kind.
    #[serde(default)]
    pub kind: String,
    /// Only this state.
    #[serde(default)]
    pub state: String,
    /// Ids below this one.
    pub after: Option<i64>,
}

impl Filter {
    fn some(s: &str) -> Option<String> {
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    }

    /// The store's list for this filter, one row more than a page (to know of a next).
    pub fn list(&self, state: Option<JobState>) -> JobList {
        JobList {
            state,
            queue: Filter::some(&self.queue),
            kind: Filter::some(&self.kind),
            principal: None,
            before_id: self.after,
            limit: PAGE + 1,
        }
    }

    /// The query string of this filter's page after `id`.
    pub fn next(&self, path: &str, id: i64) -> String {
        format!(
            "{path}?queue={}&kind={}&state={}&after={id}",
            urlencode(&self.queue),
            urlencode(&self.kind),
            urlencode(&self.state)
        )
    }
}

/// `GET /jobs`.
pub async fn page(State(state): State<DashState>, ctx: Ctx, Query(f): Query<Filter>) -> Response {
    let job_state = match Filter::some(&f.state).map(|s| s.parse::<JobState>()) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            let body = html! { p.notice.error { (e) } };
            return layout::page(&ctx, "/jobs", "Jobs", body, None);
        }
    };
    let live = match state.idem.jobs(f.list(job_state)).await {
        Ok(rows) => table(&rows, &f, "/jobs"),
        Err(e) => html! { p.notice.error { "The jobs could not be read: " (e) } },
    };
    layout::page(&ctx, "/jobs", "Jobs", filters(&f, true), Some(live))
}

/// The filter form; with `states`, a state selector too.
pub fn filters(f: &Filter, states: bool) -> Markup {
    html! {
        form.filters method="get" {
            label { "queue " input type="text" name="queue" value=(f.queue); }
            label { "kind " input type="text" name="kind" value=(f.kind); }
            @if states {
                label { "state "
                    select name="state" {
                        option value="" { "any" }
                        @for s in JobState::ALL {
                            option value=(s.as_str()) selected[f.state == s.as_str()] { (s.as_str()) }
                        }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// A page of jobs (`rows` holds one more than a page when there is a next one).
pub fn table(rows: &[JobRow], f: &Filter, path: &str) -> Markup {
    let shown = &rows[..rows.len().min(PAGE as usize)];
    html! {
        @if shown.is_empty() {
            p.empty { "No jobs match." }
        } @else {
            table.grid.jobs {
                thead { tr {
                    th.num { "id" } th { "kind" } th { "queue" } th { "state" }
                    th.num { "attempt" } th { "created" } th { "run at" } th { "last error" }
                }}
                tbody {
                    @for j in shown {
                        tr {
                            td.num { a href={ "/jobs/" (j.id) } { (j.id) } }
                            td { (j.kind) }
                            td { (j.queue) }
                            td { (badge(j.state.as_str())) }
                            td.num { (j.attempt) "/" (j.max_attempts) }
                            td { (time(j.created_at)) }
                            td { (time(j.run_at)) }
                            td.error { (j.last_error.as_deref().map(short).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        @if rows.len() > PAGE as usize && let Some(last) = shown.last() {
            p.pager { a href=(f.next(path, last.id)) { "Older →" } }
        }
    }
}

/// The first line of `s`, cut to 120 characters.
pub fn short(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None if line.len() < s.len() => format!("{line}…"),
        None => line.to_string(),
    }
}
