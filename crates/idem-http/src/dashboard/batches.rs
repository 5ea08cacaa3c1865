//! Batches (`/batches`): newest first with their counts (total, completed, dead,
//! cancelled, unfinished), state and successor; `?id=N` shows one.

use axum::extract::{Query, State};
use axum::response::Response;
use idem_store::{BatchList, BatchRow};
use maud::{Markup, html};
use serde::Deserialize;

use super::DashState;
use super::layout::{self, Ctx, badge, maybe_time, time};

/// Rows per page.
const PAGE: u32 = 50;

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct View {
    /// Only this batch.
    id: Option<i64>,
    /// Batches with ids below this one.
    after: Option<i64>,
}

/// `GET /batches`.
pub async fn page(State(state): State<DashState>, ctx: Ctx, Query(v): Query<View>) -> Response {
    let rows = match v.id {
        Some(id) => state
            .idem
            .batch_get(id)
            .await
            .map(|b| b.into_iter().collect()),
        None => {
            let list = BatchList {
                state: None,
                principal: None,
                before_id: v.after,
                limit: PAGE + 1,
            };
            state.idem.batches(list).await
        }
    };
    let live = match rows {
        Ok(rows) => table(&rows),
        Err(e) => html! { p.notice.error { "The batches could not be read: " (e) } },
    };
    layout::page(&ctx, "/batches", "Batches", html! {}, Some(live))
}

fn table(rows: &[BatchRow]) -> Markup {
    let shown = &rows[..rows.len().min(PAGE as usize)];
    html! {
        @if shown.is_empty() { p.empty { "No batch." } } @else {
            table.grid {
                thead { tr {
                    th.num { "id" } th { "state" } th.num { "total" } th.num { "completed" } th.num { "dead" }
                    th.num { "cancelled" } th.num { "unfinished" } th { "successor" } th { "created" } th { "finished" }
                }}
                tbody { @for b in shown { tr {
                    td.num { (b.id) }
                    td { (badge(b.state.as_str())) }
                    td.num { (b.total) }
                    td.num { (b.completed) }
                    td.num { (b.dead) }
                    td.num { (b.cancelled) }
                    td.num { (b.unfinished_children()) }
                    td { (b.successor.kind) @if let Some(j) = b.successor_job_id { " → " a href={ "/jobs/" (j) } { "job " (j) } } }
                    td { (time(b.created_at)) }
                    td { (maybe_time(b.finished_at)) }
                }}}
            }
        }
        @if rows.len() > PAGE as usize && let Some(last) = shown.last() {
            p.pager { a href={ "/batches?after=" (last.id) } { "Older →" } }
        }
    }
}
