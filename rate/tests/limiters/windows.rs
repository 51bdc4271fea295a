//! Windows on the default clock fall on the grid the stores use: multiples
//! of the window length since the Unix epoch (a daily window from UTC
//! midnight), so a limit moved from one process to Redis or Memcached
//! resets at the same instants.

use std::num::NonZeroU32;
use std::time::{SystemTime, UNIX_EPOCH};
use weir_rate::{FixedWindow, KeyedLimiter, Quota, RateLimiter};

const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// Nanoseconds to the next UTC midnight, from the system clock.
fn to_utc_midnight() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    let now = u64::try_from(now).expect("before 2554");
    DAY_NS - now % DAY_NS
}

/// The reset a fresh daily window reports is the time to UTC midnight
/// (within a second of slack for the clock reads between), not a day.
#[test]
fn a_daily_window_ends_at_utc_midnight_on_the_default_clock() {
    let quota = Quota::per_day(NonZeroU32::new(1000).unwrap());
    let single = RateLimiter::new(FixedWindow::new(quota));
    let keyed = KeyedLimiter::<String, _>::new(FixedWindow::new(quota));
    let expected = to_utc_midnight();
    for reset in [
        single.check().reset_after(),
        keyed.check(&"k".to_owned()).reset_after(),
    ] {
        let reset = u64::try_from(reset.as_nanos()).expect("a day fits");
        assert!(
            reset.abs_diff(expected) < 1_000_000_000,
            "the window resets in {reset} ns; UTC midnight is {expected} ns away"
        );
    }
}
