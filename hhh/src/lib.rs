//! A fair-share flood limiter for UDP services: Cloudflare's rakelimit
//! (hierarchical heavy hitters over the 4-tuple) in user space, and the same
//! algorithm as an in-kernel socket filter.
//!
//! A [`Classifier`] watches the packet rate of every generalisation of each
//! packet's 4-tuple (the exact tuple, its source subnet, any source port,
//! ...; twelve in all, see [`Generalisation`]) and limits floods at the
//! most specific generalisation that explains them: a flood from one address
//! and port is held to the limit while the rest of its subnet is untouched;
//! a reflection attack from thousands of addresses but one source port,
//! each under the limit, is held as one stream. Every drop says why
//! ([`Verdict`], [`Limited`]).
//!
//! # What the limit bounds
//!
//! The limit is a fair share per culprit, not a cap on the total. A packet
//! limited at one level is not counted at the more general ones (that is
//! what spares a flood's neighbours), so `n` streams that are *each* over
//! the limit are each held near it: about `n × limit` passes in all, as in
//! rakelimit. Two consequences to size for:
//!
//! * **Sketch width.** A sketch too narrow for the traffic lifts honest
//!   keys' estimates over the limit by collision, which limits them at
//!   their own level, so they stop counting at the aggregate meant to catch
//!   them together. Give each sketch many times `flood rate ÷ limit` slots
//!   ([`ClassifierBuilder::shape`]; the default is 2 × 1024).
//! * **Bursts.** Within one instant each packet raises a rate by only
//!   `1/window`, and the pass chance `limit / rate` falls only as the rate
//!   grows, so a burst of `n` packets from one stream passes about
//!   `limit · window · (1 + ln(n / (limit · window)))` of them, not
//!   `limit · window`.
//!
//! ```
//! use weir_hhh::{Classifier, FourTuple, Verdict};
//!
//! let rake = Classifier::try_new(100)?; // packets per second, per generalisation
//! let tuple = FourTuple::from_socket_addrs(
//!     "203.0.113.9:40000".parse()?,
//!     "192.0.2.1:443".parse()?,
//! );
//! match rake.classify(&tuple) {
//!     Verdict::Drop(why) => eprintln!("dropped: {why}"),
//!     _ => { /* deliver */ }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! * [`Classifier`] / [`ClassifierBuilder`]: the limiter, with an injectable
//!   [`clock`] and [`random`] source for deterministic tests.
//! * [`FourTuple`]: the input, from socket addresses or read from raw
//!   IPv4/IPv6 packets ([`FourTuple::attribute`]).
//! * `udp` (feature `tokio`, on by default): a tokio UDP socket that drops
//!   flood packets before the application sees them.
//! * `kernel` (feature `bpf`): the same limiter as a BPF socket filter,
//!   dropping floods before they cost a wake-up, a copy or a system call.
//! * [`sim`]: replay streams of packets against a classifier on a simulated
//!   clock, to see what a limit does to a traffic mix.
//! * Feature `metrics`: the counters through the `metrics` facade, published
//!   on demand (`Classifier::publish_metrics`, and the kernel filter's).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod classifier;
mod error;
#[cfg(feature = "bpf")]
#[cfg_attr(docsrs, doc(cfg(feature = "bpf")))]
pub mod kernel;
mod lattice;
pub mod random;
pub mod sim;
mod sync;
#[cfg(feature = "metrics")]
mod telemetry;
// Hidden, as tokio's test-util is: fixtures for weir's own tests and
// bench report, behind a feature no user needs.
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod test_util;
mod tuple;
// tokio compiles its networking out under `--cfg loom`.
#[cfg(all(feature = "tokio", not(loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod udp;

/// The clocks a [`Classifier`] reads ([`ClassifierBuilder::clock`]),
/// re-exported from weir-limits so that depending on weir-hhh is enough to
/// drive one by hand.
pub mod clock {
    pub use weir_limits::clock::{Clock, ManualClock, MonotonicClock, Timestamp};
}

/// The shape of the classifier's sketches ([`ClassifierBuilder::shape`]),
/// re-exported from weir-limits.
pub mod sketch {
    /// The sketch and window errors a
    /// [`ConfigError::Limits`](crate::ConfigError::Limits) carries.
    pub use weir_limits::ConfigError;
    pub use weir_limits::{Layout, Shape};
}

pub use classifier::{Classifier, ClassifierBuilder, LevelStats, Limited, Stats, Verdict};
pub use error::ConfigError;
pub use lattice::{AddrScope, Generalisation, PortScope, Prefixes};
pub use tuple::{Attribution, FourTuple, Layer, ParseError, TupleV4, TupleV6, UNKNOWN_PORT};
/// A packet rate in fixed point: the [`Limited::rate`] and limit of a verdict.
pub use weir_limits::ewma::FixedRate;

// The README's examples run as doc tests too (its kernel example needs `bpf`).
#[cfg(all(doctest, feature = "bpf"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
