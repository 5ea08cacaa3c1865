//! CSRF protection of every state-changing dashboard action.
//!
//! An action is a `POST` whose form carries the session's CSRF token (compared in
//! constant time). Where the browser says where the request came from, it must be this
//! server: `Sec-Fetch-Site` must be `same-origin`, or, without it, `Origin` must name the
//! `Host` the request was sent to. A request that fails either is refused with 403 before the
//! handler runs, so it changes nothing. The session cookie is `SameSite=Strict` as well.

use axum::extract::{Form, FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;

use super::layout::refusal;
use super::session::Session;

/// A form that carries the CSRF token.
pub trait CsrfForm {
    /// The token the form carried.
    fn csrf(&self) -> &str;
}

/// Implements [`CsrfForm`] for forms whose token is their `csrf` field.
macro_rules! csrf_field {
    ($($form:ty),+ $(,)?) => {
        $(impl $crate::dashboard::csrf::CsrfForm for $form {
            fn csrf(&self) -> &str {
                &self.csrf
            }
        })+
    };
}
pub(crate) use csrf_field;

/// An action's form, from a request whose session and origin were checked.
pub struct Action<T> {
    /// Who acts.
    pub session: Session,
    /// The form.
    pub form: T,
}

impl<S, T> FromRequest<S> for Action<T>
where
    S: Send + Sync,
    T: CsrfForm + DeserializeOwned + Send,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let Some(session) = request.extensions().get::<Session>().cloned() else {
            return Err(refused("no session"));
        };
        same_origin(request.headers()).map_err(refused)?;
        let Form(form) = Form::<T>::from_request(request, state)
            .await
            .map_err(|_| refused("the form is missing fields or malformed"))?;
        if !token_matches(&session.csrf, form.csrf()) {
            return Err(refused("the form's CSRF token is not this session's"));
        }
        Ok(Action { session, form })
    }
}

/// Whether `given` is `expected`, in constant time.
pub fn token_matches(expected: &str, given: &str) -> bool {
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// Refuses a request the browser says came from another site, saying why.
/// `Sec-Fetch-Site` decides when present (every current browser sends it). Without it,
/// an `Origin` must name this host; `Origin: null` (what a browser sends under this
/// dashboard's `Referrer-Policy: no-referrer`) says nothing, and the token decides.
pub fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        return match site {
            "same-origin" => Ok(()),
            _ => Err("the request came from another site (Sec-Fetch-Site)"),
        };
    }
    if let Some(origin) = text(header::ORIGIN).filter(|o| *o != "null") {
        let host = text(header::HOST).unwrap_or("");
        let origin_host = origin.split_once("://").map(|(_, h)| h).unwrap_or("");
        if origin_host != host {
            return Err("the request came from another origin (Origin)");
        }
    }
    Ok(())
}

/// The 403 page of a refused action.
pub fn refused(why: &str) -> Response {
    refusal(
        StatusCode::FORBIDDEN,
        &format!("Refused: {why}. Nothing was changed; reload the page and try again."),
    )
}
