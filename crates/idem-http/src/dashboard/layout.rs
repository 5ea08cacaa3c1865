//! The page shell every dashboard page shares (navigation, the operator, logout), the
//! live fragment the script refreshes, the security headers of every answer, and the
//! small formatters the pages use.
//!
//! What must stay true: every value reaches the HTML through `maud`, which escapes it;
//! no page has inline script or style (the Content-Security-Policy forbids both).

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use idem_store::Timestamp;
use maud::{DOCTYPE, Markup, html};

use super::session::Session;

/// The policy every answer carries.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'";

/// The request header the live-refresh script sends: answer with the fragment only.
pub const FRAGMENT_HEADER: &str = "x-idem-fragment";

/// The pages, in the navigation's order: (path, label).
const NAV: [(&str, &str); 7] = [
    ("/", "Queues"),
    ("/jobs", "Jobs"),
    ("/dead", "Dead letters"),
    ("/intents", "Intents"),
    ("/batches", "Batches"),
    ("/guarantees", "Guarantees"),
    ("/ledger", "Ledger"),
];

/// What a page handler knows about its request: the session, and whether the script
/// asked for the live fragment only.
pub struct Ctx {
    /// The operator's session.
    pub session: Session,
    /// Answer with the live fragment only.
    pub fragment: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let Some(session) = parts.extensions.get::<Session>().cloned() else {
            return Err(refusal(
                StatusCode::UNAUTHORIZED,
                "No session: log in first.",
            ));
        };
        let fragment = parts.headers.contains_key(FRAGMENT_HEADER);
        Ok(Ctx { session, fragment })
    }
}

/// A page: `fixed` above the `live` part, which the script refreshes every few seconds
/// (`None`: a page that does not refresh). A fragment request gets `live` alone.
pub fn page(ctx: &Ctx, nav: &str, title: &str, fixed: Markup, live: Option<Markup>) -> Response {
    if ctx.fragment
        && let Some(live) = &live
    {
        return Html(live.clone().into_string()).into_response();
    }
    let body = html! {
        (fixed)
        @if let Some(live) = live {
            div #live data-refresh-ms="5000" { (live) }
        }
    };
    Html(shell(Some(&ctx.session), nav, title, body).into_string()).into_response()
}

/// The whole document around `body`; the navigation and logout only with a session.
pub fn shell(session: Option<&Session>, nav: &str, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · idem" }
                link rel="stylesheet" href="/assets/dashboard.css";
                script src="/assets/dashboard.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "idem" }
                    @if let Some(s) = session {
                        nav {
                            @for (path, label) in NAV {
                                a.active[path == nav] href=(path) { (label) }
                            }
                        }
                        form.logout method="post" action="/logout" {
                            span.who { (s.principal.name()) }
                            input type="hidden" name="csrf" value=(s.csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
                footer { "idem · times in UTC" }
            }
        }
    }
}

/// A refusal page with `status`: nothing was done, and why.
pub fn refusal(status: StatusCode, message: &str) -> Response {
    let body = html! {
        p.notice.error { (message) }
        p { a href="/" { "Back to the dashboard" } " · " a href="/login" { "Log in" } }
    };
    let title = status.canonical_reason().unwrap_or("Refused");
    (status, Html(shell(None, "", title, body).into_string())).into_response()
}

/// The middleware that gives every dashboard answer its security headers.
pub async fn secure(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, name: &'static str, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CSP);
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "no-referrer");
    set(headers, "x-frame-options", "DENY");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, "cache-control", "no-store");
    }
    response
}

/// `ts` as UTC, to the second.
pub fn time(ts: Timestamp) -> String {
    ts.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// `ts` or a dash.
pub fn maybe_time(ts: Option<Timestamp>) -> String {
    ts.map(time).unwrap_or_else(|| "–".into())
}

/// A duration in milliseconds for people: `850 ms`, `12.3 s`, `4 min 5 s`, `2 h 3 min`.
pub fn duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A lease or due time counted down live by the script: the seconds left at `now`.
pub fn countdown(now: Timestamp, until: Option<Timestamp>) -> Markup {
    match until {
        Some(until) => {
            let ms = (until - now).num_milliseconds();
            html! { span.countdown data-ms=(ms) title=(time(until)) { (duration_ms(ms)) } }
        }
        None => html! { "–" },
    }
}

/// A state as a coloured badge.
pub fn badge(state: &str) -> Markup {
    html! { span class={ "badge " (state) } { (state) } }
}
