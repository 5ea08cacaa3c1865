//! [`EffectKey`]: the name of the fact an effect asserts, in domain words.
//!
//! `EffectKey::new("receipt-mail").part(order_id)` renders as `receipt-mail:42`. The key
//! must be the same on every attempt of the same logical request and different for
//! logically different effects: never an attempt number, a fence, a timestamp or a hash
//! of input that may change between attempts. An input that legitimately changes is a
//! new revision: `.revision(2)` renders `…:rev:2`.
//!
//! Parts are separated by `:`; a `:` or `%` inside a part is percent-encoded, so two
//! different lists of parts never render the same key.

use std::fmt::Display;

use crate::error::IdemError;

/// Longest kind accepted.
pub const MAX_KIND_LEN: usize = 64;
/// Longest whole key accepted (bytes).
pub const MAX_KEY_LEN: usize = 512;

/// The name of the fact an effect asserts.
///
/// ```
/// use idem::EffectKey;
///
/// let key = EffectKey::new("thumbnail").part(1234).part(640);
/// assert_eq!(key.render().unwrap(), "thumbnail:1234:640");
/// let key = EffectKey::new("ledger-entry").part("t-9").part("legacy-migration").revision(2);
/// assert_eq!(key.render().unwrap(), "ledger-entry:t-9:legacy-migration:rev:2");
/// assert!(EffectKey::new("receipt-mail").render().is_err()); // names no fact
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EffectKey {
    kind: String,
    parts: Vec<String>,
    revision: Option<u32>,
}

impl EffectKey {
    /// A key of `kind` (e.g. `receipt-mail`), to be completed with parts.
    pub fn new(kind: impl Into<String>) -> Self {
        EffectKey {
            kind: kind.into(),
            parts: Vec::new(),
            revision: None,
        }
    }

    /// Adds a part naming the fact (an order id, an asset id and a width, …).
    pub fn part(mut self, part: impl Display) -> Self {
        self.parts.push(part.to_string());
        self
    }

    /// Marks a new revision of an input that legitimately changed.
    pub fn revision(mut self, n: u32) -> Self {
        self.revision = Some(n);
        self
    }

    /// The kind (the first segment).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The key as stored, or an error naming what is wrong and what to do.
    pub fn render(&self) -> Result<String, IdemError> {
        check_kind(&self.kind)?;
        if self.parts.is_empty() {
            return Err(invalid(format!(
                "effect key {:?} has no parts: name the fact it asserts, e.g. \
                 EffectKey::new({:?}).part(order_id)",
                self.kind, self.kind
            )));
        }
        let mut key = self.kind.clone();
        for part in &self.parts {
            check_part(&self.kind, part)?;
            key.push(':');
            key.push_str(&part.replace('%', "%25").replace(':', "%3A"));
        }
        if let Some(n) = self.revision {
            key.push_str(&format!(":rev:{n}"));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(invalid(format!(
                "effect key {}… is {} bytes; keep it under {MAX_KEY_LEN} (name the fact by \
                 its ids, not its content)",
                prefix(&key, 40),
                key.len()
            )));
        }
        Ok(key)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn prefix(s: &str, max: usize) -> &str {
    let end = (0..=max.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    &s[..end]
}

fn invalid(msg: String) -> IdemError {
    IdemError::InvalidKey(msg)
}

fn check_kind(kind: &str) -> Result<(), IdemError> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
    let first_ok = kind
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if first_ok && kind.len() <= MAX_KIND_LEN && kind.chars().all(ok_char) {
        return Ok(());
    }
    Err(invalid(format!(
        "effect key kind {kind:?} is not valid: use 1 to {MAX_KIND_LEN} lowercase letters, \
         digits, '.', '_' or '-', starting with a letter or digit (e.g. \"receipt-mail\")"
    )))
}

fn check_part(kind: &str, part: &str) -> Result<(), IdemError> {
    if !part.is_empty() && !part.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Ok(());
    }
    Err(invalid(format!(
        "a part of effect key {kind:?} is {part:?}: parts must be non-empty, without \
         whitespace or control characters (use the ids that name the fact)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_render_in_domain_words() {
        let k = EffectKey::new("receipt-mail").part(42);
        assert_eq!(k.render().unwrap(), "receipt-mail:42");
        assert_eq!(k.kind(), "receipt-mail");
        let k = EffectKey::new("price").part("sku-1").revision(3);
        assert_eq!(k.render().unwrap(), "price:sku-1:rev:3");
    }

    #[test]
    fn separators_inside_parts_cannot_collide() {
        let a = EffectKey::new("k").part("a:b").part("c").render().unwrap();
        let b = EffectKey::new("k").part("a").part("b:c").render().unwrap();
        assert_ne!(a, b);
        assert_eq!(a, "k:a%3Ab:c");
        let pct = EffectKey::new("k").part("50%3A").render().unwrap();
        assert_eq!(pct, "k:50%253A");
    }

    #[test]
    fn bad_keys_are_refused_with_what_to_do() {
        let err = |k: EffectKey| k.render().unwrap_err().to_string();
        assert!(err(EffectKey::new("Receipt").part(1)).contains("lowercase"));
        assert!(err(EffectKey::new("").part(1)).contains("kind \"\""));
        assert!(err(EffectKey::new("mail")).contains("has no parts"));
        assert!(err(EffectKey::new("mail").part("")).contains("non-empty"));
        assert!(err(EffectKey::new("mail").part("a b")).contains("whitespace"));
        assert!(err(EffectKey::new("mail").part("x".repeat(600))).contains("bytes"));
    }

    #[test]
    fn a_long_key_cut_inside_a_character_is_refused_not_a_panic() {
        // Byte 40 falls inside the second byte of a two-byte character.
        let part = format!("{}{}", "a".repeat(34), "é".repeat(300));
        let msg = EffectKey::new("mail").part(part).render().unwrap_err();
        assert!(msg.to_string().contains("bytes"), "{msg}");
    }

    /// Any parts at all: rendering never panics; a key renders to at most
    /// [`MAX_KEY_LEN`] bytes or is refused with a message; distinct part lists never
    /// render the same key.
    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn parts() -> impl Strategy<Value = Vec<String>> {
            prop::collection::vec(any::<String>(), 0..6)
        }

        fn key_of(parts: &[String]) -> EffectKey {
            parts.iter().fold(EffectKey::new("k"), |k, p| k.part(p))
        }

        proptest! {
            #[test]
            fn rendering_never_panics(kind in any::<String>(), parts in parts(), rev in any::<Option<u32>>()) {
                let mut key = parts.iter().fold(EffectKey::new(kind), |k, p| k.part(p));
                if let Some(n) = rev {
                    key = key.revision(n);
                }
                match key.render() {
                    Ok(rendered) => prop_assert!(rendered.len() <= MAX_KEY_LEN),
                    Err(e) => prop_assert!(!e.to_string().is_empty()),
                }
            }

            #[test]
            fn long_unicode_keys_are_refused_with_their_size(part in "\\PC{200,400}") {
                let key = EffectKey::new("k").part(part.replace(char::is_whitespace, "x"));
                if let Err(e) = key.render() {
                    prop_assert!(e.to_string().contains("bytes") || e.to_string().contains("part"));
                }
            }

            #[test]
            fn distinct_parts_render_distinct_keys(a in parts(), b in parts()) {
                if let (Ok(ka), Ok(kb)) = (key_of(&a).render(), key_of(&b).render()) {
                    prop_assert_eq!(ka == kb, a == b, "{:?} vs {:?}", a, b);
                }
            }
        }
    }
}
