//! [`Gradient2`]: the limit scaled by how much slower than at no load the
//! origin answers, plus a queue allowance.

use super::builder::{AlgorithmBuilder, Own, sealed};
use super::window::{Summary, grow};
use super::windowed::{Rule, Windowed, windowed_algorithm};
use super::{ConfigError, factor};

/// The default choice, for an origin that queues when overloaded: Netflix's
/// Gradient2, with the no-load latency measured by probes.
///
/// Each window (see the [module docs](super)) computes the gradient
/// `g = tolerance × no_load / latency`, clamped to `[0.5, 1]`:
///
/// * latency within half the tolerance of no load: capacity is unused (a
///   start, or an origin that recovered); the limit grows by a quarter, or
///   by the queue allowance `max(1, √limit / 2)` if that is more;
/// * `g = 1` otherwise (latency within `tolerance` of no load): the origin
///   is not queueing; the limit grows by the allowance;
/// * `g < 1`: the target is `limit × g + allowance`, never above the
///   limit, and the limit moves `smoothing` of the way to it — all the
///   way when `g` is at its floor (latency at least twice the tolerated),
///   a queue no noise explains;
/// * a window with a drop multiplies the limit by `backoff`.
///
/// Growth never takes the limit beyond twice the requests in flight.
///
/// In steady overload the limit settles where `limit × (1 − g)` equals the
/// allowance: about `tolerance × capacity + allowance` requests in flight,
/// so latency a little above `tolerance` times the no-load latency (the
/// tolerance absorbs noise, the allowance is the standing queue). Where Netflix's version adds the allowance even when the
/// gradient says the origin queues (so latency can creep), a window beyond
/// the tolerance never raises the limit here, and the no-load latency does
/// not follow the load (see the module docs on probes).
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_adaptive::{Algorithm, Gradient2};
///
/// let gradient = Gradient2::builder()
///     .tolerance(1.25)
///     .max_limit(NonZeroU32::new(500).unwrap())
///     .probe_interval(Some(Duration::from_secs(30)))
///     .build()?;
/// assert_eq!(gradient.limit(), 20);
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient2 {
    core: Windowed,
    rule: Gradient2Rule,
}

/// Gradient2's own settings.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Gradient2Rule {
    tolerance: f64,
    smoothing: f64,
    backoff: f64,
}

impl Default for Gradient2 {
    /// Limits 1 to 1000 starting at 20, tolerance 1.2, smoothing 0.5,
    /// backoff 0.9, windows of at least 10 ms and 16 samples, a probe
    /// every 10 s.
    fn default() -> Self {
        Gradient2::builder().checked()
    }
}

impl Gradient2 {
    /// Settings beyond the defaults.
    ///
    /// ```
    /// use weir_adaptive::Gradient2;
    ///
    /// assert!(Gradient2::builder().tolerance(0.9).build().is_err(), "below 1");
    /// ```
    pub fn builder() -> AlgorithmBuilder<Gradient2> {
        AlgorithmBuilder::with(Own {
            seed: 0x6772_6164,
            ..Own::default()
        })
    }
}

impl Rule for Gradient2Rule {
    fn backoff(&self) -> f64 {
        self.backoff
    }

    fn next_estimate(&self, window: &Summary, estimate: f64, no_load: f64) -> f64 {
        let gradient = (self.tolerance * no_load / window.latency).clamp(0.5, 1.0);
        let allowance = (estimate.sqrt() / 2.0).max(1.0);
        if window.latency <= (1.0 + self.tolerance) / 2.0 * no_load {
            // Within half the tolerance of no load: capacity is unused
            // (a start, or an origin that grew), so grow by a quarter,
            // which finds it in a few windows; the queue that forms
            // past it stops the growth.
            grow(
                estimate,
                allowance.max(estimate / 4.0),
                window.max_in_flight,
            )
        } else if gradient >= 1.0 {
            grow(estimate, allowance, window.max_in_flight)
        } else if gradient > 0.5 {
            let target = (estimate * gradient + allowance).min(estimate);
            estimate + self.smoothing * (target - estimate)
        } else {
            // At least twice the tolerated latency: a queue, not
            // noise (the origin lost capacity), so go to the target
            // at once; smoothing here would keep the queue for windows
            // that each last several of these latencies.
            (estimate * gradient + allowance).min(estimate)
        }
    }
}

windowed_algorithm!(Gradient2);

impl sealed::Probes for Gradient2 {}
impl sealed::Tolerates for Gradient2 {}

impl AlgorithmBuilder<Gradient2> {
    fn checked(self) -> Gradient2 {
        match self.build() {
            Ok(gradient) => gradient,
            Err(e) => unreachable!("the default settings are valid: {e}"),
        }
    }

    /// The share of the way to its target a decreasing limit moves per
    /// window while latency is under twice the tolerated (in (0, 1];
    /// default 0.5); beyond, it moves all the way.
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.own.smoothing = smoothing;
        self
    }
}

impl sealed::Build for Gradient2 {
    fn build(settings: AlgorithmBuilder<Self>) -> Result<Gradient2, ConfigError> {
        let (core, backoff) = Windowed::build(&settings)?;
        let tolerance = factor("tolerance", settings.own.tolerance, |t| t >= 1.0)?;
        let smoothing = factor("smoothing", settings.own.smoothing, |s| s > 0.0 && s <= 1.0)?;
        Ok(Gradient2 {
            core,
            rule: Gradient2Rule {
                tolerance,
                smoothing,
                backoff,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_samples::{at, ok, ok_us};
    use crate::{Algorithm, Outcome, Sample};
    use std::time::Duration;

    /// Without probes: the first window sets the no-load latency.
    fn unprobed() -> Gradient2 {
        Gradient2::builder().probe_interval(None).build().unwrap()
    }

    #[test]
    fn grows_by_a_quarter_while_latency_is_at_no_load() {
        let mut g = unprobed();
        let mut limits = Vec::new();
        for ms in 0..600 {
            g.update(at(ms), ok(1, 40));
            limits.push(g.limit());
        }
        // A window of 16 samples every 16 ms: 20, 25, 31, 39, ... up to
        // twice the 40 in flight.
        assert_eq!(limits[14..17], [20, 25, 25]);
        assert_eq!(limits[30..33], [25, 31, 31]);
        assert_eq!(limits[46..49], [31, 39, 39]);
        assert_eq!(g.limit(), 80);
    }

    /// One window at 1 ms, 40 in flight: the no-load latency is 1 ms and
    /// the limit has grown by a quarter, to 25.
    fn after_one_window() -> Gradient2 {
        let mut g = unprobed();
        for ms in 0..16 {
            g.update(at(ms), ok(1, 40));
        }
        assert_eq!(g.limit(), 25);
        g
    }

    #[test]
    fn grows_by_the_allowance_within_the_tolerance() {
        let mut g = after_one_window();
        // 15 % slower: beyond half the tolerance of 20 %, within it.
        let mut limits = Vec::new();
        for ms in 16..64 {
            g.update(at(ms), ok_us(1_150, 40));
            limits.push(g.limit());
        }
        // 25 + √25 / 2 = 27.5, then 27.5 + 2.6 = 30.1 (the first sample
        // of each window started before it opened, and is not counted).
        assert_eq!(limits[15..18], [25, 27, 27]);
        assert_eq!(limits[32..35], [27, 30, 30]);
    }

    #[test]
    fn cuts_to_the_target_at_once_beyond_twice_the_tolerance() {
        let mut g = after_one_window();
        // 3× no load: the gradient is at its floor of 0.5. One window
        // takes the limit to 25 × 0.5 + √25 / 2 = 15, not half-way there.
        let mut limits = Vec::new();
        for ms in 16..96 {
            g.update(at(ms), ok(3, 40));
            limits.push(g.limit());
        }
        let first_cut = limits.iter().position(|&l| l != 25).unwrap();
        assert_eq!(limits[first_cut], 15, "{limits:?}");
    }

    #[test]
    fn shrinks_towards_capacity_when_latency_doubles() {
        let mut g = unprobed();
        for ms in 0..50 {
            g.update(at(ms), ok(1, 40));
        }
        let before = g.limit();
        for ms in 50..400 {
            g.update(at(ms), ok(3, 40));
        }
        // Latency 3× no load: g = 0.5, the floor; settles at
        // 2 × allowance.
        assert!(g.limit() < before, "{} !< {before}", g.limit());
        assert!(g.limit() <= 10, "{}", g.limit());
    }

    #[test]
    fn a_drop_backs_off() {
        let mut g = Gradient2::builder()
            .probe_interval(None)
            .window_samples(std::num::NonZeroU32::new(1).unwrap())
            .window(Duration::ZERO)
            .build()
            .unwrap();
        g.update(at(1), Sample::new(Duration::ZERO, Outcome::Dropped, 20));
        assert_eq!(g.limit(), 18);
    }

    #[test]
    fn a_probe_pins_half_the_limit_and_learns_a_slower_origin() {
        let mut g = Gradient2::default();
        // The first sample starts a probe.
        g.update(at(0), ok(1, 1));
        assert_eq!(g.limit(), 10);
        for ms in 1..=16 {
            g.update(at(ms), ok(1, 10));
        }
        assert_eq!(g.limit(), 20, "probe over");
        // The origin becomes 5× slower per request, whatever the load:
        // the limit shrinks...
        for ms in 17..2_000 {
            g.update(at(ms), ok(5, 4));
        }
        let shrunk = g.limit();
        assert!(shrunk <= 8, "{shrunk}");
        // ...until a probe (due within 12.5 s) measures 5 ms as no load.
        for ms in 2_000..14_000 {
            g.update(at(ms), ok(5, 20));
        }
        assert!(g.limit() > shrunk, "{} !> {shrunk}", g.limit());
    }

    #[test]
    fn ignored_samples_change_nothing() {
        let mut g = Gradient2::default();
        let before = g.clone();
        for ms in 0..100 {
            g.update(at(ms), Sample::new(Duration::ZERO, Outcome::Ignored, 1));
        }
        assert_eq!(g, before);
    }

    #[test]
    fn settings_are_checked() {
        assert!(Gradient2::builder().smoothing(0.0).build().is_err());
        assert!(Gradient2::builder().backoff(1.0).build().is_err());
        assert!(Gradient2::builder().tolerance(f64::NAN).build().is_err());
        assert!(
            Gradient2::builder()
                .probe_interval(Some(Duration::ZERO))
                .build()
                .is_err()
        );
    }
}
