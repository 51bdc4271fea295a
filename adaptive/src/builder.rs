//! [`AlgorithmBuilder`]: one settings type for every adaptive algorithm, so the
//! settings they share are written (and documented) once.

use super::{Common, ConfigError};
use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::time::Duration;

/// Settings of the algorithm `A` ([`Aimd`](super::Aimd),
/// [`Vegas`](super::Vegas) or [`Gradient2`](super::Gradient2)), from
/// `A::builder()` with `A`'s defaults; `build` checks them.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_adaptive::{Aimd, Vegas};
///
/// let aimd = Aimd::builder().initial_limit(NonZeroU32::new(8).unwrap()).build()?;
/// let vegas = Vegas::builder().alpha(2).beta(4).probe_interval(None).build()?;
/// assert!(Aimd::builder().backoff(1.5).build().is_err());
/// # let _ = (aimd, vegas);
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct AlgorithmBuilder<A> {
    pub(super) common: Common,
    pub(super) window: Duration,
    pub(super) backoff: f64,
    /// What only some algorithms read; each `A::builder()` sets its own
    /// defaults here and each `build` takes what its algorithm needs.
    pub(super) own: Own,
    algorithm: PhantomData<fn() -> A>,
}

/// The settings of one algorithm or two (see each builder method).
#[derive(Debug, Clone)]
pub(super) struct Own {
    /// Aimd: a slower request counts as a drop.
    pub(super) timeout: Option<Duration>,
    /// How often the no-load latency is measured again.
    pub(super) probe_interval: Option<Duration>,
    /// The least time a probe may run before it ends unmeasured.
    pub(super) probe_timeout: Duration,
    /// The probe jitter's and the windows' seed.
    pub(super) seed: u64,
    /// Vegas: the queue band.
    pub(super) alpha: u32,
    pub(super) beta: u32,
    /// Aimd, Gradient2.
    pub(super) tolerance: f64,
    /// Gradient2.
    pub(super) smoothing: f64,
}

impl Default for Own {
    fn default() -> Self {
        Self {
            timeout: None,
            probe_interval: Some(Duration::from_secs(10)),
            probe_timeout: Duration::from_millis(250),
            seed: 0,
            alpha: 3,
            beta: 6,
            tolerance: 1.2,
            smoothing: 0.5,
        }
    }
}

impl<A> AlgorithmBuilder<A> {
    /// The defaults every algorithm shares (limits 1 to 1000 starting at
    /// 20, backoff 0.9, windows of at least 10 ms and 16 samples) with
    /// `own` for the rest.
    pub(super) fn with(own: Own) -> Self {
        Self {
            common: Common::default(),
            window: Duration::from_millis(10),
            backoff: 0.9,
            own,
            algorithm: PhantomData,
        }
    }

    /// The smallest limit (default 1).
    pub fn min_limit(mut self, min: NonZeroU32) -> Self {
        self.common.min = min.get();
        self
    }

    /// The largest limit (default 1000).
    pub fn max_limit(mut self, max: NonZeroU32) -> Self {
        self.common.max = max.get();
        self
    }

    /// The limit before any sample (default 20).
    pub fn initial_limit(mut self, initial: NonZeroU32) -> Self {
        self.common.initial = initial.get();
        self
    }

    /// The least time a window of samples lasts before it is judged
    /// (default 10 ms); it also waits for
    /// [`window_samples`](Self::window_samples).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The fewest samples a window is judged on (default 16).
    pub fn window_samples(mut self, samples: NonZeroU32) -> Self {
        self.common.window_samples = samples.get();
        self
    }

    /// What a window with a drop multiplies the limit by (in [0.5, 1);
    /// default 0.9).
    pub fn backoff(mut self, backoff: f64) -> Self {
        self.backoff = backoff;
        self
    }
}

impl<A: sealed::Probes> AlgorithmBuilder<A> {
    /// How often the no-load latency is measured again (default 10 s,
    /// jittered by ±25 %). `None` never probes: the no-load latency is
    /// then the lowest window seen, which can never learn that the origin
    /// became slower, and which a window of cheap requests lowers for
    /// good: use it only where every request costs the origin alike.
    pub fn probe_interval(mut self, interval: Option<Duration>) -> Self {
        self.own.probe_interval = interval;
        self
    }

    /// How long a probe may run at least before it ends unmeasured
    /// (default 250 ms): it runs until its window closes, or this long,
    /// or four times as long as the last window took to close, whichever
    /// is longest. Requests that never finish (streams, long polls) may
    /// hold every place a probe pins; it then gathers no samples and ends
    /// at this bound, leaving the no-load latency as it was.
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.own.probe_timeout = timeout;
        self
    }

    /// Seeds the probe jitter and the choice of latencies a window keeps
    /// (deterministic for a given seed). The default is a constant of each
    /// algorithm: a deployment that would rather its probe times not
    /// follow from the source seeds it from a secret of its own.
    pub fn seed(mut self, seed: u64) -> Self {
        self.own.seed = seed;
        self
    }
}

impl<A: sealed::Tolerates> AlgorithmBuilder<A> {
    /// How much slower than at no load the origin may answer (a window's
    /// third-quartile latency over the no-load one, at least 1) before the
    /// limit stops growing (Gradient2, default 1.2) or backs off (AIMD,
    /// default 1.5).
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.own.tolerance = tolerance;
        self
    }
}

impl<A: sealed::Build> AlgorithmBuilder<A> {
    /// The algorithm.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if the limits are not `min ≤ initial ≤ max`, a
    /// factor is out of its range (the backoff; Gradient2's tolerance and
    /// smoothing), Vegas's thresholds are not `0 < alpha < beta`, or a
    /// duration is zero (Aimd's timeout, a probe interval or timeout) or
    /// over 2⁶⁴ ns.
    pub fn build(self) -> Result<A, ConfigError> {
        A::build(self)
    }
}

pub(super) mod sealed {
    use super::{AlgorithmBuilder, ConfigError};

    /// The algorithms that probe for the no-load latency, whose builders
    /// take a probe interval and a seed.
    #[allow(unnameable_types)] // sealed: bounds of the builder's methods only
    pub trait Probes {}

    /// The algorithms with a latency tolerance (AIMD, Gradient2).
    #[allow(unnameable_types)] // sealed: bounds of the builder's methods only
    pub trait Tolerates {}

    /// The algorithms a [`AlgorithmBuilder`] builds, each checking its own settings.
    #[allow(unnameable_types)] // sealed: only weir-adaptive's algorithms build
    pub trait Build: Sized {
        fn build(settings: AlgorithmBuilder<Self>) -> Result<Self, ConfigError>;
    }
}
