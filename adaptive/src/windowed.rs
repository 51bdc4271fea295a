//! The windowed core that [`Aimd`](crate::Aimd), [`Vegas`](crate::Vegas)
//! and [`Gradient2`](crate::Gradient2) share, as Netflix's
//! `AbstractLimit` and `WindowedLimit` are shared: the limit's estimate
//! between its bounds, the window of samples, the no-load baseline and its
//! probes, and the back-off on a window with a drop. Each algorithm is a
//! core and a rule of its own: its settings, what counts as a drop, and
//! where a window without one moves the estimate ([`Rule`]);
//! [`windowed_algorithm!`] writes its [`Algorithm`](crate::Algorithm)
//! impl from the two.

use super::{Common, ConfigError, Outcome, Sample, factor, nanos};
use crate::builder::AlgorithmBuilder;
use crate::window::{Baseline, Summary, Window, feed, window_nanos};
use std::time::Duration;

/// The state every windowed algorithm keeps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Windowed {
    pub(crate) common: Common,
    /// The limit before rounding and the probes' pinning.
    pub(crate) estimate: f64,
    window: Window,
    baseline: Baseline,
}

/// What one algorithm adds to the core: its own settings and judgement.
pub(crate) trait Rule {
    /// The factor a window with a drop multiplies the estimate by.
    fn backoff(&self) -> f64;

    /// Whether `sample` counts as a drop (a dropped request; for AIMD a
    /// timed-out one too).
    fn is_drop(&self, sample: &Sample) -> bool {
        sample.outcome == Outcome::Dropped
    }

    /// The estimate after a window without drops that ran at `window`'s
    /// latency, the no-load latency being `no_load` (ns), from `estimate`.
    fn next_estimate(&self, window: &Summary, estimate: f64, no_load: f64) -> f64;
}

impl Windowed {
    /// The core `settings` describe, and their back-off factor, checked.
    pub(crate) fn build<A>(settings: &AlgorithmBuilder<A>) -> Result<(Self, f64), ConfigError> {
        let mut common = settings.common;
        common.check()?;
        common.window_ns = window_nanos(settings.window)?;
        let backoff = factor("backoff", settings.backoff, |b| (0.5..1.0).contains(&b))?;
        let own = &settings.own;
        let interval = own
            .probe_interval
            .map(|i| nanos("probe_interval", i))
            .transpose()?;
        let probe_timeout = nanos("probe_timeout", own.probe_timeout)?;
        let core = Self::new(common, interval, probe_timeout, own.seed);
        Ok((core, backoff))
    }

    /// A core starting at `common`'s initial limit, probing every
    /// `interval` ns (never if `None`), each probe ending within
    /// `probe_timeout` ns, with jitter from `seed`.
    pub(crate) fn new(
        common: Common,
        interval: Option<u64>,
        probe_timeout: u64,
        seed: u64,
    ) -> Self {
        Self {
            common,
            estimate: f64::from(common.initial),
            window: Window::new(0, seed),
            baseline: Baseline::new(interval, probe_timeout, seed),
        }
    }

    /// The limit now: the estimate rounded within its bounds, or what a
    /// probe pins it to.
    pub(crate) fn limit(&self) -> u32 {
        let limit = self.common.limit_of(self.estimate);
        self.baseline.pinned(limit, &self.common).unwrap_or(limit)
    }

    /// The no-load latency, once measured.
    pub(crate) fn no_load(&self) -> Option<Duration> {
        self.baseline.known()
    }

    /// When a probe must end without a sample (ns), if one is running.
    pub(crate) fn next_tick(&self) -> Option<u64> {
        self.baseline.next_tick()
    }

    /// Ends a probe whose deadline has passed at `now` (ns).
    pub(crate) fn tick(&mut self, now: u64) {
        self.baseline.tick(&mut self.window, now);
    }

    /// Feeds `sample`, finished at `now` (ns); a window that closes moves
    /// the estimate: by the back-off if it held a drop, else by `rule`.
    pub(crate) fn update(&mut self, rule: &impl Rule, now: u64, sample: &Sample) {
        let dropped = rule.is_drop(sample);
        let Some(window) = feed(
            &mut self.baseline,
            &mut self.window,
            &self.common,
            now,
            sample,
            dropped,
        ) else {
            return;
        };
        let next = if window.drops > 0 {
            self.estimate * rule.backoff()
        } else {
            let no_load = self.baseline.no_load(window.latency);
            rule.next_estimate(&window, self.estimate, no_load)
        };
        self.estimate = self.common.clamp(next);
    }
}

/// `impl Algorithm for $algorithm` for an algorithm of two fields, its
/// `core` ([`Windowed`]) and its `rule` ([`Rule`]): written once for every
/// windowed algorithm. Called in the algorithm's own module, a child of the
/// crate root, whose items it names through `super`.
macro_rules! windowed_algorithm {
    ($algorithm:ty) => {
        impl super::Algorithm for $algorithm {
            fn limit(&self) -> u32 {
                self.core.limit()
            }

            fn no_load(&self) -> Option<std::time::Duration> {
                self.core.no_load()
            }

            fn next_tick(&self) -> Option<u64> {
                self.core.next_tick()
            }

            fn tick<C>(&mut self, now: super::clock::Timestamp<C>) {
                self.core.tick(now.as_nanos());
            }

            fn update<C>(&mut self, now: super::clock::Timestamp<C>, sample: super::Sample) {
                self.core.update(&self.rule, now.as_nanos(), &sample);
            }
        }
    };
}

pub(crate) use windowed_algorithm;
