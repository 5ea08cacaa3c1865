//! Guarantees (`/guarantees`): what each effect class promises, and the class of every
//! job kind this server runs, as `idem guarantees` prints them.

use axum::extract::State;
use axum::response::Response;
use idem::EffectClass;
use maud::html;

use super::DashState;
use super::layout::{self, Ctx};

/// `GET /guarantees`.
pub async fn page(State(state): State<DashState>, ctx: Ctx) -> Response {
    let body = html! {
        p { "Delivery is at-least-once: a handler may run more than once. What each effect class guarantees about the handler's effect:" }
        table.grid {
            thead { tr { th { "effect class" } th { "guarantee" } th { "mechanism" } } }
            tbody { @for c in EffectClass::ALL { tr { td { code { (c.as_str()) } } td { (c.guarantee()) } td { (c.mechanism()) } } } }
        }
        h2 { "Job kinds of this server" }
        @if state.kinds.is_empty() { p.empty { "This server runs no job kind (workers elsewhere may)." } } @else {
            table.grid {
                thead { tr { th { "job kind" } th { "effect class" } th { "guarantee" } } }
                tbody { @for (kind, c) in state.kinds.iter() { tr { td { code { (kind) } } td { (c.as_str()) } td { (c.guarantee()) } } } }
            }
        }
    };
    layout::page(&ctx, "/guarantees", "Guarantees", body, None)
}
