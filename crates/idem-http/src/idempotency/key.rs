//! The `Idempotency-Key` header: one line, 1–255 printable ASCII characters, bare or as a
//! quoted structured-field string (RFC 8941 `sf-string`, with `\"` and `\\` escapes).

use axum::http::HeaderMap;

/// The header's name.
pub const HEADER: &str = "idempotency-key";

/// The longest key accepted, in characters.
pub const MAX_LEN: usize = 255;

/// Why a key was refused; the message names the rule and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidKey(pub String);

impl std::fmt::Display for InvalidKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key of a request: `Ok(None)` without the header, `Ok(Some(key))` with one valid
/// line, `Err` for anything else (two lines, empty, too long, control or non-ASCII
/// characters, a malformed quoted string).
pub fn from_headers(headers: &HeaderMap) -> Result<Option<String>, InvalidKey> {
    let mut lines = headers.get_all(HEADER).iter();
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() {
        return Err(InvalidKey(
            "the request has more than one Idempotency-Key header line; send exactly one".into(),
        ));
    }
    parse(first.as_bytes()).map(Some)
}

/// The key a header value denotes.
pub fn parse(raw: &[u8]) -> Result<String, InvalidKey> {
    let raw = trim(raw);
    let key = if raw.first() == Some(&b'"') {
        unquote(raw)?
    } else {
        if let Some(b) = raw.iter().find(|b| !(0x20..=0x7e).contains(*b)) {
            return Err(InvalidKey(format!(
                "the Idempotency-Key holds the byte 0x{b:02x}; a key is printable ASCII \
                 (0x20–0x7e) only"
            )));
        }
        String::from_utf8(raw.to_vec()).expect("printable ASCII is UTF-8")
    };
    if key.is_empty() {
        return Err(InvalidKey(
            "the Idempotency-Key is empty; send 1 to 255 printable ASCII characters, such as \
             a UUID"
                .into(),
        ));
    }
    if key.len() > MAX_LEN {
        return Err(InvalidKey(format!(
            "the Idempotency-Key is {} characters long; the limit is {MAX_LEN}",
            key.len()
        )));
    }
    Ok(key)
}

fn trim(raw: &[u8]) -> &[u8] {
    let start = raw.iter().position(|b| *b != b' ' && *b != b'\t');
    let end = raw.iter().rposition(|b| *b != b' ' && *b != b'\t');
    match (start, end) {
        (Some(s), Some(e)) => &raw[s..=e],
        _ => &[],
    }
}

fn unquote(raw: &[u8]) -> Result<String, InvalidKey> {
    let malformed = |why: &str| {
        InvalidKey(format!(
            "the quoted Idempotency-Key is malformed: {why}; send the key bare, or as a \
             structured-field string (\"…\" with \\\" and \\\\ escapes)"
        ))
    };
    let inner = &raw[1..];
    let mut key = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    loop {
        match bytes.next() {
            None => return Err(malformed("it has no closing quote")),
            Some(b'"') => break,
            Some(b'\\') => match bytes.next() {
                Some(c @ (b'"' | b'\\')) => key.push(*c as char),
                _ => return Err(malformed("a backslash escapes only \" or \\")),
            },
            Some(b) if (0x20..=0x7e).contains(b) => key.push(*b as char),
            Some(b) => {
                return Err(malformed(&format!(
                    "it holds the byte 0x{b:02x}; a key is printable ASCII only"
                )));
            }
        }
    }
    if bytes.next().is_some() {
        return Err(malformed("there is text after the closing quote"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bare_and_quoted_keys_name_the_same_key() {
        assert_eq!(parse(b"order-42").unwrap(), "order-42");
        assert_eq!(parse(b"\"order-42\"").unwrap(), "order-42");
        assert_eq!(parse(b"  spaced key ").unwrap(), "spaced key");
        assert_eq!(
            parse(br#""a \"quoted\" \\ key""#).unwrap(),
            r#"a "quoted" \ key"#
        );
    }

    #[test]
    fn bad_keys_are_refused_with_the_rule() {
        for (raw, why) in [
            (&b""[..], "empty"),
            (b"\"\"", "empty"),
            (b"tab\there", "0x09"),
            (b"caf\xc3\xa9", "0xc3"),
            (b"\"open", "no closing quote"),
            (b"\"a\"b", "after the closing quote"),
            (b"\"a\\nb\"", "backslash"),
        ] {
            let err = parse(raw).unwrap_err();
            assert!(err.0.contains(why), "{raw:?}: {err}");
        }
        assert_eq!(parse("k".repeat(255).as_bytes()).unwrap().len(), 255);
        assert!(
            parse("k".repeat(256).as_bytes())
                .unwrap_err()
                .0
                .contains("256")
        );
    }

    #[test]
    fn two_header_lines_are_refused() {
        let mut headers = HeaderMap::new();
        assert_eq!(from_headers(&headers).unwrap(), None);
        headers.append(HEADER, HeaderValue::from_static("a"));
        assert_eq!(from_headers(&headers).unwrap(), Some("a".into()));
        headers.append(HEADER, HeaderValue::from_static("a"));
        assert!(
            from_headers(&headers)
                .unwrap_err()
                .0
                .contains("more than one")
        );
    }
}
