//! The keyed benchmark's contenders: weir's exact and sketch limiters
//! (lean `allows` and full `check`, default and cheap clocks) and
//! governor's keyed limiter, with the quota and sizing they share.

use crate::contest;
use std::num::NonZeroU32;
use std::time::Duration;
use weir_limits::clock::Clock;
use weir_rate::{Gcra, KeyedLimiter, Quota, SketchLimiter};

/// A keyed limiter checked by `u32` key in the benchmark.
pub trait KeyedContender: Sync {
    /// Check one unit for `key`; true when allowed.
    fn check(&self, key: u32) -> bool;
}

impl<C: Clock> KeyedContender for KeyedLimiter<u32, Gcra, C> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        KeyedLimiter::check(self, &key).is_allowed()
    }
}

impl<C: Clock> KeyedContender for SketchLimiter<C> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        SketchLimiter::check(self, &key).is_allowed()
    }
}

/// A weir limiter checked through its lean `allows` (yes or no, no
/// `Decision`): the job governor's `check_key` does.
pub struct Lean<L>(pub L);

impl<C: Clock> KeyedContender for Lean<KeyedLimiter<u32, Gcra, C>> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.0.allows(&key)
    }
}

impl<C: Clock> KeyedContender for Lean<SketchLimiter<C>> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.0.allows(&key)
    }
}

impl KeyedContender for governor::DefaultKeyedRateLimiter<u32> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// governor's keyed limiter on its upkeep clock (quanta's `recent()`).
pub type GovernorUpkeep = governor::RateLimiter<
    u32,
    governor::state::keyed::DefaultKeyedStateStore<u32>,
    governor::clock::QuantaUpkeepClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

impl KeyedContender for GovernorUpkeep {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// The per-key quota of the benchmark: GCRA at 1000 per second with the
/// default burst (the limit), as a new user of either crate would write it.
pub fn bench_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1000).expect("non-zero"))
}

/// The load the sketch is sized for: 40 M checks a second in all, about
/// what two threads of this machine push through it.
pub const SIZED_FOR: u64 = 40_000_000;

/// The wrong-denial target the sketch is sized for (0.1%).
pub const WRONG_DENIALS: f64 = 0.001;

/// One contender of the keyed benchmark.
pub struct Contender {
    /// Name in the tables.
    pub name: &'static str,
    /// Builds a fresh limiter and checks every key of each stream on its own
    /// thread (barrier-started), calling the limiter directly; returns the
    /// slowest thread's time and the number allowed.
    pub time: fn(&[Vec<u32>]) -> (Duration, u64),
    /// Builds a fresh limiter.
    pub build: fn() -> Box<dyn KeyedContender>,
}

macro_rules! contender {
    ($name:expr, $build:expr) => {
        Contender {
            name: $name,
            time: |streams| time_limiter(($build)(), streams),
            build: || Box::new(($build)()),
        }
    };
}

fn time_limiter<L: KeyedContender>(limiter: L, streams: &[Vec<u32>]) -> (Duration, u64) {
    let limiter = std::hint::black_box(limiter);
    contest::run_streams(streams, |key| limiter.check(key))
}

fn governor_quota() -> governor::Quota {
    let q = bench_quota();
    governor::Quota::per_second(NonZeroU32::new(q.limit()).expect("non-zero"))
        .allow_burst(NonZeroU32::new(q.burst()).expect("non-zero"))
}

fn governor_keyed() -> governor::DefaultKeyedRateLimiter<u32> {
    governor::RateLimiter::keyed(governor_quota())
}

/// governor on an upkeep clock refreshed as often as weir's
/// [`RecentClock`](weir_rate::clock::RecentClock).
fn governor_upkeep() -> GovernorUpkeep {
    let clock =
        governor::clock::QuantaUpkeepClock::from_interval(weir_rate::clock::RecentClock::INTERVAL)
            .expect("an upkeep thread");
    governor::RateLimiter::dashmap_with_clock(governor_quota(), clock)
}

/// The sketch as its own sizing rule sizes it for [`SIZED_FOR`] checks a
/// second at [`WRONG_DENIALS`].
pub fn sized_sketch() -> SketchLimiter {
    SketchLimiter::try_sized_for(
        bench_quota(),
        std::num::NonZeroU64::new(SIZED_FOR).expect("non-zero"),
        WRONG_DENIALS,
    )
    .expect("a valid sizing")
}

/// weir's keyed limiters and governor's.
pub fn contenders() -> Vec<Contender> {
    vec![
        contender!(GOVERNOR, governor_keyed),
        contender!(EXACT, || Lean(exact())),
        contender!(SKETCH, || Lean(sized_sketch())),
        contender!("weir KeyedLimiter, check (full Decision)", exact),
        contender!("weir SketchLimiter, check (full Decision)", sized_sketch),
        contender!(GOVERNOR_UPKEEP, governor_upkeep),
        contender!(EXACT_RECENT, || Lean(KeyedLimiter::with_clock(
            Gcra::new(bench_quota()),
            weir_rate::clock::RecentClock::new()
        ))),
    ]
}

/// governor on the cheaper clock it offers, against weir on its own.
pub(super) const GOVERNOR_UPKEEP: &str = "governor keyed on QuantaUpkeepClock (1 ms)";
/// weir's exact limiter on its cheaper clock.
pub(super) const EXACT_RECENT: &str = "weir KeyedLimiter<Gcra> on RecentClock, allows";

/// The anchor every ratio is taken against.
pub(super) const GOVERNOR: &str = "governor keyed (DashMap, GCRA)";
/// weir's exact limiter on the lean path, judged against the goal.
pub(super) const EXACT: &str = "weir KeyedLimiter<Gcra> (exact), allows";
/// weir's sketch on the lean path, judged against the goal.
pub(super) const SKETCH: &str = "weir SketchLimiter (sized by its rule), allows";

pub(super) fn exact() -> KeyedLimiter<u32, Gcra> {
    KeyedLimiter::new(Gcra::new(bench_quota()))
}
