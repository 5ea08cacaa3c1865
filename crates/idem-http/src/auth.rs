//! Bearer tokens, each naming a [`Principal`].
//!
//! A request carries `Authorization: Bearer <token>` (one header line). The token is
//! compared with every configured token in constant time (SHA-256 digests compared with
//! `subtle`, all of them, with no early exit), so neither a token's bytes nor which
//! token matched shows in the timing. No token or a wrong one is 401. Tokens are never
//! logged: [`Tokens`] prints only principals.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::principal::Principal;
use crate::problem::Problem;

/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// How requests authenticate.
#[derive(Clone)]
pub enum Auth {
    /// Bearer tokens.
    Tokens(Arc<Tokens>),
    /// `--dev`: no authentication; every request is the operator `dev`. Loopback only.
    Dev,
}

/// The configured tokens.
#[derive(Default)]
pub struct Tokens {
    entries: Vec<([u8; 32], Principal)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(_, p)| p.name()))
            .finish()
    }
}

impl Tokens {
    /// No tokens yet.
    pub fn new() -> Tokens {
        Tokens::default()
    }

    /// Adds `token` for `principal`. Refused when the token is shorter than
    /// [`MIN_TOKEN_LEN`], is already configured, or the principal's name is invalid.
    pub fn add(&mut self, principal: Principal, token: &str) -> Result<(), String> {
        if !Principal::valid_name(principal.name()) {
            return Err(format!(
                "principal name {:?} is invalid; use 1–64 of A–Z a–z 0–9 _ . -",
                principal.name()
            ));
        }
        if token.len() < MIN_TOKEN_LEN || token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(format!(
                "the token of principal {:?} must be at least {MIN_TOKEN_LEN} printable ASCII \
                 characters without spaces (generate one with `openssl rand -hex 32`)",
                principal.name()
            ));
        }
        let digest = digest(token.as_bytes());
        if self
            .entries
            .iter()
            .any(|(d, _)| bool::from(d.ct_eq(&digest)))
        {
            return Err(format!(
                "the token of principal {:?} is already configured for another principal; \
                 each principal needs its own token",
                principal.name()
            ));
        }
        self.entries.push((digest, principal));
        Ok(())
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal `token` names, comparing with every token in constant time.
    pub fn principal(&self, token: &[u8]) -> Option<Principal> {
        let given = digest(token);
        let mut found = None;
        for (digest, principal) in &self.entries {
            if bool::from(digest.ct_eq(&given)) {
                found = Some(principal.clone());
            }
        }
        found
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The middleware: puts the request's [`Principal`] in its extensions, or answers 401.
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let principal = match &auth {
        Auth::Dev => Some(Principal::operator("dev")),
        Auth::Tokens(tokens) => bearer(&request).and_then(|t| tokens.principal(t)),
    };
    let Some(principal) = principal else {
        let mut response = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send `Authorization: Bearer <token>` with a token configured for a principal",
        )
        .rejection();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    };
    request.extensions_mut().insert(principal);
    next.run(request).await
}

fn bearer(request: &Request) -> Option<&[u8]> {
    let mut lines = request.headers().get_all(header::AUTHORIZATION).iter();
    let value = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    let value = value.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_principal_and_nothing_else() {
        let mut tokens = Tokens::new();
        tokens
            .add(Principal::client("shop"), "shop-token-0123456789")
            .unwrap();
        tokens
            .add(Principal::operator("ops"), "ops-token-0123456789")
            .unwrap();
        assert_eq!(
            tokens.principal(b"shop-token-0123456789"),
            Some(Principal::client("shop"))
        );
        assert_eq!(tokens.principal(b"shop-token-012345678"), None);
        assert_eq!(tokens.principal(b""), None);
        assert!(tokens.add(Principal::client("x"), "short").is_err());
        assert!(
            tokens
                .add(Principal::client("again"), "shop-token-0123456789")
                .is_err()
        );
        assert!(
            tokens
                .add(Principal::client("a:b"), "another-token-0123456789")
                .is_err()
        );
        assert!(!format!("{tokens:?}").contains("token"));
    }
}
