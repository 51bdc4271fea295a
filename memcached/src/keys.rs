//! How a limiter names its keys on Memcached: one name per limiter key,
//! limit and window, within Memcached's 250 bytes of printable ASCII, and
//! never the same name for two different keys or prefixes, nor for
//! windows of different lengths. GCRA and the token bucket keep one time
//! per key whatever the quota, so a new quota takes the key over.
//!
//! A store key is `<prefix>:<limit>:<key>|<slot>`:
//!
//! * `<prefix>` is the limiter's, checked at build time to be 1 to 48 of
//!   `A-Z a-z 0-9 _ . -`, so the first `:` ends it;
//! * `<limit>` names the algorithm with every parameter that lays out its
//!   state (a window's length, a sliding window's counters), so limiters
//!   whose windows differ never read each other's counters;
//! * `<key>` is the limiter key percent-encoded (every byte outside a safe
//!   set, `%` `|` `#` and space included, as `%XX`), which is one-to-one;
//!   a key whose encoding is longer than 128 bytes is named instead by `#`
//!   and the first 128 bits of its SHA-256, in hex (`#` never begins an
//!   encoding, so the two namings cannot meet; a client cannot choose a
//!   key that collides with another's);
//! * `|<slot>` is the window or sub-window a counter counts (empty for the
//!   algorithms that keep one value per key).
//!
//! Keys are placed on servers by everything before the `|`, so all the
//! counters of one key live on one server and one pipeline reads them.

use sha2::{Digest, Sha256};

/// The longest prefix a limiter may have.
pub(crate) const MAX_PREFIX: usize = 48;

/// The longest encoded key kept as is; longer ones are hashed.
const MAX_VERBATIM: usize = 128;

/// Whether `prefix` can start every key of a limiter.
pub(crate) fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Bytes a key keeps as they are: printable ASCII that is not a space and
/// not one of the characters the layout gives a meaning (`%` escapes, `|`
/// ends the routed part, `#` starts a hashed name).
fn safe(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'%' | b'|' | b'#')
}

/// `key` as a store key's `<key>` part.
pub(crate) fn encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key.as_bytes() {
        if safe(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(hex_digit(b >> 4));
            out.push(hex_digit(b & 0xf));
        }
        if out.len() > MAX_VERBATIM {
            return hashed(key);
        }
    }
    out
}

fn hashed(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(33);
    out.push('#');
    for &b in &digest[..16] {
        out.push(hex_digit(b >> 4));
        out.push(hex_digit(b & 0xf));
    }
    out
}

fn hex_digit(n: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(n & 0xf)])
}

/// The part of a store key that places it on a server: up to its `|`.
pub(crate) fn routed(store_key: &[u8]) -> &[u8] {
    match store_key.iter().position(|&b| b == b'|') {
        Some(end) => &store_key[..end],
        None => store_key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_keys_stay_readable() {
        assert_eq!(encode("203.0.113.9"), "203.0.113.9");
        assert_eq!(encode("user:42"), "user:42");
        assert_eq!(encode("a b|c%"), "a%20b%7cc%25");
        assert_eq!(encode("é"), "%c3%a9");
    }

    #[test]
    fn long_keys_are_hashed_into_the_limit() {
        let long = "x".repeat(200);
        let name = encode(&long);
        assert!(name.starts_with('#') && name.len() == 33, "{name}");
        assert_eq!(encode(&long), name, "the same on every call");
        assert_ne!(encode(&"x".repeat(201)), name);
        // The longest store key: prefix, limit, key and slot.
        let store_key = format!(
            "{}:sw1024x18446744073709551615:{}|18446744073709551615",
            "p".repeat(48),
            "%ff".repeat(42)
        );
        assert!(store_key.len() <= 250, "{}", store_key.len());
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(valid_prefix("api.v2-login_1"));
        assert!(!valid_prefix(""));
        assert!(!valid_prefix("a:b"));
        assert!(!valid_prefix("a b"));
        assert!(!valid_prefix(&"p".repeat(49)));
    }

    #[test]
    fn routing_ignores_the_slot() {
        assert_eq!(routed(b"api:fw1:k|17"), b"api:fw1:k");
        assert_eq!(routed(b"api:gcra:k"), b"api:gcra:k");
    }

    proptest! {
        /// Two different keys never get the same name, and every name is a
        /// valid Memcached key (printable, no space, short).
        #[test]
        fn names_are_one_to_one_and_valid(a in ".{0,80}", b in ".{0,80}") {
            let (na, nb) = (encode(&a), encode(&b));
            prop_assert_eq!(a == b, na == nb);
            for name in [&na, &nb] {
                prop_assert!(name.len() <= MAX_VERBATIM + 1);
                prop_assert!(name.bytes().all(|c| c.is_ascii_graphic() && c != b'|'));
            }
        }
    }
}
