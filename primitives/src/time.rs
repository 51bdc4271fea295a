//! Saturating duration arithmetic: weir keeps time as `u64` nanoseconds
//! (584 years), and a `Duration` past that saturates instead of wrapping.

use std::time::Duration;

/// A `Duration` as whole nanoseconds, saturating at `u64::MAX` (584 years).
///
/// ```
/// use std::time::Duration;
/// use weir_primitives::time::duration_to_nanos;
///
/// assert_eq!(duration_to_nanos(Duration::from_micros(5)), 5_000);
/// assert_eq!(duration_to_nanos(Duration::MAX), u64::MAX);
/// ```
#[inline]
pub const fn duration_to_nanos(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(duration.subsec_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Exactly `as_nanos` where it fits, `u64::MAX` where it does not.
        #[test]
        fn saturates_exactly_past_u64(secs: u64, nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            let exact = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            prop_assert_eq!(duration_to_nanos(d), exact);
        }
    }
}
