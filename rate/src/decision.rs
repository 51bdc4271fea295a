//! The outcome of a check, with everything an HTTP response needs.
//!
//! Headers follow draft-ietf-httpapi-ratelimit-headers (revision 10):
//! `RateLimit-Policy: "name";q=<quota>;w=<window seconds>` and
//! `RateLimit: "name";r=<remaining>;t=<seconds until reset>`, plus the
//! standard `Retry-After: <seconds>` on a denial. Seconds are rounded **up**
//! so a client that obeys them never retries too early.

use crate::limiter::Mode;
use std::fmt;
use std::time::Duration;

/// The HTTP status of a request denied by a rate limit (Too Many Requests).
pub const TOO_MANY_REQUESTS: u16 = 429;

/// The result of a check.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());
/// let limiter = RateLimiter::with_clock(Gcra::new(quota), ManualClock::new());
/// assert!(limiter.check().is_allowed());
/// let d = limiter.check();
/// assert_eq!(d.remaining(), 0);
/// assert_eq!(d.ratelimit_policy("api"), "\"api\";q=2;w=60");
/// let denied = limiter.check();
/// assert_eq!(denied.status(), Some(429));
/// assert_eq!(denied.retry_after_header().as_deref(), Some("30"));
/// assert_eq!(denied.ratelimit("api"), "\"api\";r=0;t=60");
/// ```
#[must_use = "a decision not looked at lets every request through"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) conforming: bool,
    pub(crate) limit: u32,
    pub(crate) window: Duration,
    pub(crate) remaining: Remaining,
    pub(crate) reset_after: Duration,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) delay: Duration,
    pub(crate) receipt: Option<Receipt>,
}

/// What an allowed check spent: its cost and the instant (on the limiter's
/// clock, after the limiter's own clamping of time that went backwards) it
/// was charged to. A refund names the spending it gives back by its
/// receipt, so it can only return capacity where that spending was
/// counted; see [`Limiter::refund`](crate::Limiter::refund).
///
/// Allowed checks hand receipts out ([`Decision::receipt`]), and so do
/// forced charges ([`Limiter::charge`](crate::Limiter::charge) and the
/// containers' `charge`). Refund each one at most once, and only to the
/// limiter and key that issued it: another spending charged at the same
/// instant would be given back in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    at_ns: u64,
    cost: u32,
    /// Charged on Redis (the instant is the server's clock), not in process:
    /// a Redis limiter refunds such a receipt on Redis and any other on its
    /// local fallback, where that spending was counted.
    on_redis: bool,
}

impl Receipt {
    /// A spending of `cost` charged at `at_ns`, in process.
    #[inline]
    pub(crate) fn new(at_ns: u64, cost: u32) -> Self {
        Self {
            at_ns,
            cost,
            on_redis: false,
        }
    }

    /// A spending of `cost` charged on Redis at `at_ns` (server time).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn on_redis(at_ns: u64, cost: u32) -> Self {
        Self {
            at_ns,
            cost,
            on_redis: true,
        }
    }

    /// Whether Redis charged it.
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn is_on_redis(self) -> bool {
        self.on_redis
    }

    /// The instant the spending was charged to, in clock nanoseconds (for
    /// a Redis limiter's receipt, nanoseconds of the server's `TIME` since
    /// the Unix epoch, whole microseconds).
    #[inline]
    pub fn at_nanos(self) -> u64 {
        self.at_ns
    }

    /// The units spent.
    #[inline]
    pub fn cost(self) -> u32 {
        self.cost
    }

    /// `cost` units of this spending (at most all of it), charged at the
    /// same instant: what a refund of part of it names.
    #[inline]
    pub(crate) fn part(self, cost: u32) -> Self {
        Self {
            cost: cost.min(self.cost),
            ..self
        }
    }
}

/// What names a spending in a refund: a [`Decision`] (its receipt, if it
/// spent anything) or the [`Receipt`] itself, such as a forced charge
/// returns. Every container's `refund` takes either.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let limiter = RateLimiter::with_clock(Gcra::new(Quota::per_second(NonZeroU32::new(2).unwrap())), ManualClock::new());
/// let charged = limiter.charge(5); // work already done: a debt of 3
/// assert!(!limiter.check().is_allowed());
/// limiter.refund(&charged); // at the same instant, all of it comes back
/// assert!(limiter.check().is_allowed());
/// ```
pub trait Spending {
    /// The receipt of the spending, if anything was spent.
    fn receipt(&self) -> Option<Receipt>;
}

impl Spending for Decision {
    #[inline]
    fn receipt(&self) -> Option<Receipt> {
        self.receipt
    }
}

impl Spending for Receipt {
    #[inline]
    fn receipt(&self) -> Option<Receipt> {
        Some(*self)
    }
}

/// Units remaining as a quotient, divided only when asked for (the
/// division is the dearest step of a GCRA check).
#[derive(Clone, Copy)]
pub(crate) struct Remaining {
    num: u64,
    den: u64,
}

impl Remaining {
    #[inline]
    pub(crate) fn exact(n: u32) -> Self {
        Self {
            num: u64::from(n),
            den: 1,
        }
    }

    /// `⌊num / den⌋` units; `den` must be non-zero.
    #[inline]
    pub(crate) fn ratio(num: u64, den: u64) -> Self {
        Self { num, den }
    }

    #[inline]
    fn get(self) -> u32 {
        u32::try_from(self.num / self.den.max(1)).unwrap_or(u32::MAX)
    }
}

impl PartialEq for Remaining {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Remaining {}

impl fmt::Debug for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

/// Nanoseconds as a `Duration`.
#[inline]
pub(crate) fn nanos(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Decision {
    pub(crate) fn allow(limit: u32, window: Duration, remaining: u32, reset_after: u64) -> Self {
        Self::allow_with(limit, window, Remaining::exact(remaining), reset_after)
    }

    #[inline]
    pub(crate) fn allow_with(
        limit: u32,
        window: Duration,
        remaining: Remaining,
        reset_after: u64,
    ) -> Self {
        Self {
            allowed: true,
            conforming: true,
            limit,
            window,
            remaining,
            reset_after: nanos(reset_after),
            retry_after: None,
            delay: Duration::ZERO,
            receipt: None,
        }
    }

    pub(crate) fn deny(
        limit: u32,
        window: Duration,
        remaining: u32,
        reset_after: u64,
        retry_after: u64,
    ) -> Self {
        Self {
            allowed: false,
            conforming: false,
            limit,
            window,
            remaining: Remaining::exact(remaining),
            reset_after: nanos(reset_after),
            retry_after: Some(nanos(retry_after.max(1))),
            delay: Duration::ZERO,
            receipt: None,
        }
    }

    /// Whether the request should proceed. In shadow (dry-run) mode this is
    /// always true; [`is_conforming`](Self::is_conforming) tells whether the
    /// limit would have denied it.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was within the limit (false for a denial, also in
    /// shadow mode where it is let through anyway).
    #[inline]
    pub fn is_conforming(&self) -> bool {
        self.conforming
    }

    /// The quota's units per window (`q` of `RateLimit-Policy`).
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The quota's window (`w` of `RateLimit-Policy`).
    #[inline]
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Units that could still be spent now (`r` of `RateLimit`).
    #[inline]
    pub fn remaining(&self) -> u32 {
        self.remaining.get()
    }

    /// Time until the quota is fully available again if nothing more is
    /// spent (`t` of `RateLimit`).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// For a denial, the time after which the same request would be allowed
    /// if nothing else is spent meanwhile; `None` when it conformed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// For a shaper ([`LeakyBucket::try_shaper`](crate::LeakyBucket::try_shaper)):
    /// how long the caller must wait before proceeding. Zero otherwise.
    #[inline]
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// What this check spent, to name in a refund: `Some` only for an
    /// allowed check that consumed a non-zero cost (not for a peek, a
    /// denial, or a denial let through in shadow mode).
    #[inline]
    pub fn receipt(&self) -> Option<Receipt> {
        self.receipt
    }

    /// The decision of a check of `cost` in `mode`, charged (if it spent
    /// anything) at `at_ns`: with a receipt when allowed, consumed and
    /// `cost > 0`.
    #[inline]
    pub(crate) fn charged(self, mode: Mode, at_ns: u64, cost: u32) -> Self {
        let spent = self.allowed && mode == Mode::Consume && cost > 0;
        Self {
            receipt: spent.then_some(Receipt::new(at_ns, cost)),
            ..self
        }
    }

    /// `Some(429)` when the request must be rejected, `None` when it may
    /// proceed.
    #[inline]
    pub fn status(&self) -> Option<u16> {
        (!self.allowed).then_some(TOO_MANY_REQUESTS)
    }

    /// The `RateLimit-Policy` field value for a policy called `name`.
    pub fn ratelimit_policy(&self, name: &str) -> String {
        format!(
            "{};q={};w={}",
            Quoted(name),
            self.limit,
            ceil_secs(self.window).max(1)
        )
    }

    /// The `RateLimit` field value for a policy called `name`.
    pub fn ratelimit(&self, name: &str) -> String {
        self.ratelimit_for(&PolicyName::new(name))
    }

    /// [`ratelimit`](Self::ratelimit) for a name quoted once in advance:
    /// one allocation and no formatting machinery, for servers that render
    /// this field on every response.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::{FixedWindow, PolicyName, Quota, RateLimiter};
    ///
    /// let limiter = RateLimiter::with_clock(
    ///     FixedWindow::new(Quota::per_minute(NonZeroU32::new(5).unwrap())),
    ///     ManualClock::new(),
    /// );
    /// let api = PolicyName::new("api");
    /// let d = limiter.check();
    /// assert_eq!(d.ratelimit_for(&api), d.ratelimit("api"));
    /// assert_eq!(d.ratelimit_for(&api), "\"api\";r=4;t=60");
    /// ```
    pub fn ratelimit_for(&self, policy: &PolicyName) -> String {
        let mut out = String::with_capacity(policy.0.len() + 26);
        out.push_str(&policy.0);
        out.push_str(";r=");
        push_decimal(&mut out, u64::from(self.remaining()));
        out.push_str(";t=");
        push_decimal(&mut out, ceil_secs(self.reset_after));
        out
    }

    /// The `Retry-After` value (whole seconds, rounded up) for a denial.
    pub fn retry_after_header(&self) -> Option<String> {
        if self.allowed {
            return None;
        }
        self.retry_after.map(|d| ceil_secs(d).to_string())
    }

    /// All response headers for a policy called `name`: `RateLimit-Policy`,
    /// `RateLimit`, and `Retry-After` when denied.
    pub fn headers(&self, name: &str) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("RateLimit-Policy", self.ratelimit_policy(name)),
            ("RateLimit", self.ratelimit(name)),
        ];
        if let Some(retry) = self.retry_after_header() {
            headers.push(("Retry-After", retry));
        }
        headers
    }

    /// The more restrictive of two decisions (for several limits checked
    /// together): allowed only if both are, the later reset and retry, and
    /// the limit, window and remaining of the binding limit — a denying one
    /// if any denies, otherwise the one with the least remaining. The result
    /// does not depend on the order of the two. It keeps a receipt only if
    /// both carry the same one (each limit charged the same instant); a
    /// refund could not name both spendings otherwise.
    pub fn combine(self, other: Decision) -> Decision {
        // Non-conforming first (false < true), then least remaining; the
        // limit and window only break exact ties, so the choice is symmetric.
        let binding = |d: &Decision| (d.conforming, d.remaining(), d.limit, d.window);
        let first = if binding(&other) < binding(&self) {
            other
        } else {
            self
        };
        Decision {
            allowed: self.allowed && other.allowed,
            conforming: self.conforming && other.conforming,
            reset_after: self.reset_after.max(other.reset_after),
            retry_after: match (self.retry_after, other.retry_after) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
            delay: self.delay.max(other.delay),
            receipt: match (self.receipt, other.receipt) {
                (Some(a), Some(b)) if a == b => Some(a),
                _ => None,
            },
            ..first
        }
    }

    /// The same decision let through (shadow mode): allowed, but still
    /// marked non-conforming when it exceeded the limit.
    pub(crate) fn shadowed(self) -> Self {
        Self {
            allowed: true,
            ..self
        }
    }
}

/// An RFC 8941 string: quotes and backslashes escaped, other characters
/// outside printable ASCII replaced by `?`.
/// A policy name rendered once as an RFC 8941 string (quoted, escaped), for
/// [`Decision::ratelimit_for`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyName(String);

impl PolicyName {
    /// Quote `name` (non-printable characters become `?`).
    pub fn new(name: &str) -> Self {
        Self(Quoted(name).to_string())
    }

    /// The quoted form, e.g. `"api"`.
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

/// A cost that no amount of waiting could ever allow: it exceeds what the
/// limiter can hold at once. Distinct from a denial, which passes with time.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{NeverAllowed, Quota, RateLimiter, TokenBucket};
///
/// let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
/// let limiter = RateLimiter::with_clock(TokenBucket::new(quota), ManualClock::new());
/// assert_eq!(limiter.check_n(6), Err(NeverAllowed { cost: 6, capacity: 5 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeverAllowed {
    /// The cost asked for.
    pub cost: u32,
    /// The most the limiter can ever allow at once.
    pub capacity: u32,
}

impl NeverAllowed {
    /// `Err` when `cost` exceeds `capacity`: the one edge check every
    /// limiter makes before deciding.
    ///
    /// ```
    /// use weir_rate::NeverAllowed;
    ///
    /// assert_eq!(NeverAllowed::check(5, 5), Ok(()));
    /// assert_eq!(NeverAllowed::check(6, 5), Err(NeverAllowed { cost: 6, capacity: 5 }));
    /// ```
    pub fn check(cost: u32, capacity: u32) -> Result<(), NeverAllowed> {
        if cost > capacity {
            Err(NeverAllowed { cost, capacity })
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for NeverAllowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a cost of {} can never be allowed: the limiter holds at most {}",
            self.cost, self.capacity
        )
    }
}

impl std::error::Error for NeverAllowed {}

/// Why a check at a caller-supplied time (`check_n_at` on
/// [`RateLimiter`](crate::RateLimiter), [`KeyedLimiter`](crate::KeyedLimiter)
/// or [`SketchLimiter`](crate::SketchLimiter)) was not decided. Neither
/// case changes any state.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::clock::{ManualClock, MAX_AHEAD};
/// use weir_rate::{CheckAtError, Gcra, NeverAllowed, Quota, RateLimiter};
///
/// let limiter = RateLimiter::with_clock(Gcra::new(Quota::per_second(NonZeroU32::MIN)), ManualClock::new());
/// let now = limiter.now();
/// assert_eq!(
///     limiter.check_n_at(2, now),
///     Err(CheckAtError::NeverAllowed(NeverAllowed { cost: 2, capacity: 1 }))
/// );
/// let ahead = MAX_AHEAD + Duration::from_secs(1);
/// assert_eq!(limiter.check_n_at(1, now + ahead), Err(CheckAtError::AheadOfClock { ahead }));
/// assert!(limiter.check_n_at(1, now + MAX_AHEAD).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckAtError {
    /// The cost exceeds what the limiter can ever allow at once.
    NeverAllowed(NeverAllowed),
    /// The time is more than [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past
    /// the limiter's clock, so it is not a reading of that clock.
    AheadOfClock {
        /// How far past the clock's reading it was.
        ahead: Duration,
    },
}

impl CheckAtError {
    /// `Err` when `at_ns` lies more than
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past `reading_ns`, a reading
    /// of the same clock.
    #[inline]
    pub(crate) fn check_ahead(at_ns: u64, reading_ns: u64) -> Result<(), Self> {
        let ahead = at_ns.saturating_sub(reading_ns);
        if ahead > crate::clock::MAX_AHEAD_NANOS {
            Err(Self::AheadOfClock {
                ahead: Duration::from_nanos(ahead),
            })
        } else {
            Ok(())
        }
    }
}

impl From<NeverAllowed> for CheckAtError {
    fn from(never: NeverAllowed) -> Self {
        Self::NeverAllowed(never)
    }
}

impl fmt::Display for CheckAtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverAllowed(never) => never.fmt(f),
            Self::AheadOfClock { ahead } => write!(
                f,
                "a time {ahead:?} ahead of the limiter's clock is not a reading of it (at most {:?})",
                crate::clock::MAX_AHEAD
            ),
        }
    }
}

impl std::error::Error for CheckAtError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NeverAllowed(never) => Some(never),
            Self::AheadOfClock { .. } => None,
        }
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
    fn combining_does_not_depend_on_order() {
        let allowed_empty = Decision::allow(10, Duration::from_secs(1), 0, 5);
        let denied = Decision::deny(20, Duration::from_secs(60), 3, 7, 9);
        assert_eq!(allowed_empty.combine(denied), denied.combine(allowed_empty));
        let combined = denied.combine(allowed_empty);
        assert!(!combined.is_allowed());
        assert_eq!((combined.limit(), combined.remaining()), (20, 3));
    }

    #[test]
    fn header_values_round_up_and_escape() {
        let d = Decision::deny(10, Duration::from_millis(1500), 0, 1_000_000_001, 1);
        assert_eq!(d.ratelimit_policy("a\"b"), "\"a\\\"b\";q=10;w=2");
        assert_eq!(d.ratelimit("x"), "\"x\";r=0;t=2");
        assert_eq!(d.retry_after_header().as_deref(), Some("1"));
        assert_eq!(d.headers("x").len(), 3);
        let ok = Decision::allow(10, Duration::from_secs(1), 3, 0);
        assert_eq!(ok.status(), None);
        assert_eq!(ok.headers("x").len(), 2);
        assert_eq!(d.status(), Some(429));
        assert!(!ok.combine(d).is_allowed());
        assert_eq!(ok.combine(d).remaining(), 0);
        assert!(d.shadowed().is_allowed() && !d.shadowed().is_conforming());
    }
}
