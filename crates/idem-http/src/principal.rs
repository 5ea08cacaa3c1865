//! Who a request acts for. The authentication middleware puts a [`Principal`] in the
//! request's extensions; everything after it (the Idempotency-Key layer, the handlers)
//! scopes what it reads and writes by it.

use std::sync::Arc;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    name: Arc<str>,
    operator: bool,
}

impl Principal {
    /// A principal that sees and acts on its own jobs, intents and keys only.
    pub fn client(name: impl Into<Arc<str>>) -> Principal {
        Principal {
            name: name.into(),
            operator: false,
        }
    }

    /// A principal that sees and acts on everything.
    pub fn operator(name: impl Into<Arc<str>>) -> Principal {
        Principal {
            name: name.into(),
            operator: true,
        }
    }

    /// Its name, as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it sees everything.
    pub fn is_operator(&self) -> bool {
        self.operator
    }

    /// Whether a name can be a principal's: 1–64 of `A–Z a–z 0–9 _ . -`. Keys and
    /// enqueue keys are namespaced by the name, so it must not hold the separator `:`.
    pub fn valid_name(name: &str) -> bool {
        (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    }
}
