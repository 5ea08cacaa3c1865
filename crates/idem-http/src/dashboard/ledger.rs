//! The ledger check (`/ledger`): the result of the last `idem ledger verify` run from
//! here (every running total against the sum of its entries), and a button to run it.
//! The check reads every entry, so it runs when asked, never on a refresh.

use std::sync::Mutex;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use idem_store::{LedgerMismatch, Timestamp};
use maud::html;
use serde::Deserialize;

use super::DashState;
use super::csrf::{Action, csrf_field};
use super::layout::{self, Ctx, duration_ms, time};

/// The last check's outcome.
#[derive(Debug, Default)]
pub struct LastCheck(Mutex<Option<Check>>);

/// One check.
#[derive(Debug, Clone)]
pub struct Check {
    at: Timestamp,
    took_ms: i64,
    by: String,
    outcome: Result<Vec<LedgerMismatch>, String>,
}

/// `GET /ledger`.
pub async fn page(State(state): State<DashState>, ctx: Ctx) -> Response {
    let last = state.ledger.0.lock().expect("ledger lock").clone();
    let body = html! {
        @match &last {
            None => p.empty { "No check has run from this server yet." },
            Some(c) => {
                p.meta { "Checked at " (time(c.at)) " by " (c.by) " in " (duration_ms(c.took_ms)) "." }
                @match &c.outcome {
                    Ok(m) if m.is_empty() => p.notice.ok #ledger-ok { "Every running total equals the sum of its entries." },
                    Ok(m) => {
                        p.notice.error { (m.len()) " accounts' totals differ from their entries (repair: " code { "idem ledger repair --apply" } ")." }
                        table.grid {
                            thead { tr { th { "account" } th.num { "stored total" } th.num { "sum of entries" } th.num { "entries" } } }
                            tbody { @for a in m { tr {
                                td { code { (a.account) } }
                                td.num { @match a.balance { Some(b) => (b), None => "none" } }
                                td.num { (a.sum) } td.num { (a.entries) }
                            }}}
                        }
                    }
                    Err(e) => p.notice.error { "The check failed: " (e) },
                }
            }
        }
        form method="post" action="/ledger/check" {
            input type="hidden" name="csrf" value=(ctx.session.csrf);
            button type="submit" { "Check now" }
        }
    };
    layout::page(&ctx, "/ledger", "Ledger", body, None)
}

/// The check's form.
#[derive(Deserialize)]
pub struct CheckForm {
    csrf: String,
}

/// `POST /ledger/check`: runs the check and shows it.
pub async fn check(State(state): State<DashState>, action: Action<CheckForm>) -> Response {
    let started = std::time::Instant::now();
    let outcome = state.idem.ledger_verify().await.map_err(|e| e.to_string());
    let check = Check {
        at: state.now(),
        took_ms: started.elapsed().as_millis() as i64,
        by: action.session.principal.name().to_string(),
        outcome,
    };
    *state.ledger.0.lock().expect("ledger lock") = Some(check);
    Redirect::to("/ledger").into_response()
}

csrf_field!(CheckForm);
