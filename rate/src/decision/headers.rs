//! Rendering a decision as HTTP header fields.
//!
//! Headers follow draft-ietf-httpapi-ratelimit-headers (revision 10):
//! `RateLimit-Policy: "name";q=<quota>;w=<window seconds>` and
//! `RateLimit: "name";r=<remaining>;t=<seconds until reset>`, plus the
//! standard `Retry-After: <seconds>` on a denial. Seconds are rounded **up**
//! so a client that obeys them never retries too early.

use super::{Decision, Part, Parts};
use std::fmt;

/// The HTTP status of a request denied by a rate limit (Too Many Requests).
pub(super) const TOO_MANY_REQUESTS: u16 = 429;

fn ceil_secs(d: std::time::Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn ceil_secs_ns(ns: u64) -> u64 {
    ns.div_ceil(1_000_000_000)
}

/// A window as a policy name's suffix: `1s`, `15m`, `1h`, `1d`, or
/// milliseconds (`250ms`) when not whole seconds.
fn window_label(ns: u64) -> String {
    const S: u64 = 1_000_000_000;
    for (unit, name) in [(86_400 * S, "d"), (3_600 * S, "h"), (60 * S, "m"), (S, "s")] {
        if ns >= unit && ns.is_multiple_of(unit) {
            return format!("{}{name}", ns / unit);
        }
    }
    format!("{}ms", ns.div_ceil(1_000_000))
}

impl Decision {
    /// The `RateLimit-Policy` field value of this decision's quota, for
    /// `policy`: `"name";q=<limit>;w=<window seconds>`. A decision of
    /// several limits together ([`combine`](Self::combine), an
    /// all-or-nothing set) lists each as its own item, named after
    /// `policy` and its window (`"api-1s", "api-1d"`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::{Decision, PolicyName};
    ///
    /// let api = PolicyName::new("api");
    /// let second = Decision::allow(10, Duration::from_secs(1), 9, Duration::from_millis(100));
    /// assert_eq!(second.ratelimit_policy(&api), "\"api\";q=10;w=1");
    /// let day = Decision::allow(1000, Duration::from_secs(86_400), 990, Duration::from_secs(42_102));
    /// assert_eq!(
    ///     second.combine(day).ratelimit_policy(&api),
    ///     "\"api-1s\";q=10;w=1, \"api-1d\";q=1000;w=86400"
    /// );
    /// ```
    pub fn ratelimit_policy(&self, policy: &PolicyName) -> String {
        let mut out = String::with_capacity(policy.0.len() + 26);
        self.items(policy, &mut out, |out, part| {
            out.push_str(";q=");
            push_decimal(out, u64::from(part.limit));
            out.push_str(";w=");
            push_decimal(out, ceil_secs_ns(part.window_ns).max(1));
        });
        out
    }

    /// The `RateLimit` field value of this decision, for `policy`:
    /// `"name";r=<remaining>;t=<seconds until reset>`, one item per limit
    /// of a combined decision (named as in
    /// [`ratelimit_policy`](Self::ratelimit_policy)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::{Decision, PolicyName};
    ///
    /// let d = Decision::allow(100, Duration::from_secs(60), 99, Duration::from_millis(600));
    /// assert_eq!(d.ratelimit(&PolicyName::new("api")), "\"api\";r=99;t=1");
    /// ```
    pub fn ratelimit(&self, policy: &PolicyName) -> String {
        let mut out = String::with_capacity(policy.0.len() + 26);
        self.items(policy, &mut out, |out, part| {
            out.push_str(";r=");
            push_decimal(out, u64::from(part.remaining));
            out.push_str(";t=");
            push_decimal(out, ceil_secs_ns(part.reset_after_ns));
        });
        out
    }

    /// Writes one list item per limit: its name, then what `params` adds.
    fn items(&self, policy: &PolicyName, out: &mut String, params: impl Fn(&mut String, &Part)) {
        let Some(parts) = self.parts.as_ref().map(Parts::as_slice) else {
            out.push_str(&policy.0);
            params(out, &self.own_part());
            return;
        };
        let labels: Vec<String> = parts.iter().map(|p| window_label(p.window_ns)).collect();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            // The name without its closing quote, then `-<window>`, and an
            // index where two limits share a window.
            out.push_str(&policy.0[..policy.0.len() - 1]);
            out.push('-');
            out.push_str(&labels[i]);
            if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
                out.push('-');
                push_decimal(out, i as u64);
            }
            out.push('"');
            params(out, part);
        }
    }

    /// The `Retry-After` field value of a denial (whole seconds, rounded
    /// up); `None` when the request may proceed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::Decision;
    ///
    /// let second = Duration::from_secs(1);
    /// let d = Decision::deny(1, second, 0, second, Duration::from_millis(1500));
    /// assert_eq!(d.retry_after_header().as_deref(), Some("2"));
    /// ```
    pub fn retry_after_header(&self) -> Option<String> {
        if self.allowed {
            return None;
        }
        self.retry_after().map(|d| ceil_secs(d).to_string())
    }

    /// The response header fields for a policy called `name`, as
    /// `(field name, value)` pairs: `RateLimit-Policy`, `RateLimit`, and
    /// `Retry-After` when denied. A decision that names its own policy (a
    /// key's tier: [`policy`](Self::policy)) is rendered under that name;
    /// an [`unlimited`](Self::unlimited) one has none.
    ///
    /// The name is rendered as an RFC 8941 string (see [`PolicyName`]);
    /// seconds are rounded up, so a client that obeys them never retries
    /// too early.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::{Gcra, Quota, RateLimiter};
    ///
    /// let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());
    /// let limiter = RateLimiter::with_clock(Gcra::new(quota), ManualClock::new());
    /// assert_eq!(
    ///     limiter.check().headers("api"),
    ///     [("RateLimit-Policy", "\"api\";q=2;w=60".to_owned()), ("RateLimit", "\"api\";r=1;t=30".to_owned())]
    /// );
    /// limiter.check();
    /// assert_eq!(
    ///     limiter.check().headers("api"),
    ///     [
    ///         ("RateLimit-Policy", "\"api\";q=2;w=60".to_owned()),
    ///         ("RateLimit", "\"api\";r=0;t=60".to_owned()),
    ///         ("Retry-After", "30".to_owned()),
    ///     ]
    /// );
    /// ```
    pub fn headers(&self, name: &str) -> Vec<(&'static str, String)> {
        if self.is_unlimited() {
            return Vec::new();
        }
        let policy = PolicyName::new(self.policy().unwrap_or(name));
        let mut headers = vec![
            ("RateLimit-Policy", self.ratelimit_policy(&policy)),
            ("RateLimit", self.ratelimit(&policy)),
        ];
        if let Some(retry) = self.retry_after_header() {
            headers.push(("Retry-After", retry));
        }
        headers
    }
}

/// A policy's name as the `RateLimit-Policy` and `RateLimit` fields carry
/// it: an RFC 8941 string (quotes and backslashes escaped, characters
/// outside printable ASCII replaced by `?`), rendered once so a layer that
/// writes it on every response does no escaping there.
///
/// ```
/// use weir_rate::PolicyName;
///
/// assert_eq!(PolicyName::new("per \"client\"").as_str(), r#""per \"client\"""#);
/// assert_eq!(PolicyName::new("caf\u{e9}").as_str(), "\"caf?\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyName(String);

impl PolicyName {
    /// Quote `name`.
    pub fn new(name: &str) -> Self {
        Self(Quoted(name).to_string())
    }

    /// The quoted form, e.g. `"api"` (with its quotes).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Append `n` in decimal without the formatting machinery.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// An RFC 8941 string: quotes and backslashes escaped, other characters
/// outside printable ASCII replaced by `?`.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' | '\\' => {
                    f.write_char('\\')?;
                    f.write_char(c)?;
                }
                ' '..='~' => f.write_char(c)?,
                _ => f.write_char('?')?,
            }
        }
        f.write_char('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_render_like_display() {
        for n in [0u64, 7, 10, 99, 1000, 4_294_967_295, u64::MAX] {
            let mut out = String::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn header_values_round_up_and_escape() {
        let d = Decision::deny_ns(10, 1_500_000_000, 0, 1_000_000_001, 1);
        assert_eq!(
            d.ratelimit_policy(&PolicyName::new("a\"b")),
            "\"a\\\"b\";q=10;w=2"
        );
        assert_eq!(d.ratelimit(&PolicyName::new("x")), "\"x\";r=0;t=2");
        assert_eq!(d.retry_after_header().as_deref(), Some("1"));
        assert_eq!(d.headers("x").len(), 3);
        let ok = Decision::allow_ns(10, 1_000_000_000, 3, 0);
        assert_eq!(ok.status(), None);
        assert_eq!(ok.headers("x").len(), 2);
        assert_eq!(d.status(), Some(429));
        assert!(!ok.clone().combine(d.clone()).is_allowed());
        assert_eq!(ok.combine(d.clone()).remaining(), 0);
        assert!(d.clone().shadowed().is_allowed() && !d.shadowed().is_conforming());
    }

    #[test]
    fn a_policy_name_is_quoted_once() {
        let d = Decision::allow_ns(5, 60_000_000_000, 4, 60_000_000_000);
        let api = PolicyName::new("api");
        assert_eq!(api.as_str(), "\"api\"");
        assert_eq!(d.ratelimit(&api), "\"api\";r=4;t=60");
        assert_eq!(d.ratelimit_policy(&api), "\"api\";q=5;w=60");
    }
}
