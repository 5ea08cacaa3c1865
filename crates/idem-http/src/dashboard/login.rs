//! Login with an API token, and logout.
//!
//! A token names a principal as it does for the API; an operator's opens a session and
//! its cookie, a client's is refused (403: the dashboard spans every principal's jobs),
//! a wrong one is 401 and opens nothing. The login form is checked for its origin too,
//! so another site cannot log a browser into a session of its choosing.

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::DashState;
use super::csrf::{Action, csrf_field, refused, same_origin};
use super::layout::{refusal, shell};
use super::session::{cookie_id, set_cookie};
use crate::auth::Auth;

/// The login form.
#[derive(Deserialize)]
pub struct Login {
    token: String,
}

/// The logout form.
#[derive(Deserialize)]
pub struct Logout {
    csrf: String,
}

/// `GET /login`.
pub async fn form(State(state): State<DashState>) -> Response {
    if matches!(state.auth, Auth::Dev) {
        return Redirect::to("/").into_response();
    }
    login_page(StatusCode::OK, None)
}

fn login_page(status: StatusCode, error: Option<&str>) -> Response {
    let body = html! {
        form.login method="post" action="/login" {
            p { "Log in with an operator's API token (the one " code { "Authorization: Bearer" } " takes)." }
            @if let Some(e) = error { p.notice.error { (e) } }
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            button type="submit" { "Log in" }
        }
    };
    (status, Html(shell(None, "", "Log in", body).into_string())).into_response()
}

/// `POST /login`: an operator's token opens a session.
pub async fn submit(
    State(state): State<DashState>,
    headers: HeaderMap,
    Form(login): Form<Login>,
) -> Response {
    if let Err(why) = same_origin(&headers) {
        return refused(why);
    }
    let principal = match &state.auth {
        Auth::Dev => return Redirect::to("/").into_response(),
        Auth::Tokens(tokens) => tokens.principal(login.token.trim().as_bytes()),
    };
    let Some(principal) = principal else {
        return login_page(
            StatusCode::UNAUTHORIZED,
            Some("That token is not configured."),
        );
    };
    if !principal.is_operator() {
        return refusal(
            StatusCode::FORBIDDEN,
            "The dashboard is for operator principals: it shows every principal's jobs. \
             A client principal reads its own jobs through the API.",
        );
    }
    let (id, _) = state.sessions.create(principal, state.now());
    let mut response = Redirect::to("/").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, set_cookie(&id));
    response
}

/// `POST /logout`: ends the session and removes its cookie.
pub async fn logout(
    State(state): State<DashState>,
    headers: HeaderMap,
    _: Action<Logout>,
) -> Response {
    if let Some(id) = cookie_id(&headers) {
        state.sessions.remove(&id);
    }
    let mut response = Redirect::to("/login").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, set_cookie(""));
    response
}

csrf_field!(Logout);
