//! weir-hhh: rakelimit's fair-share flood limiter for UDP services, in user
//! space.
//!
//! A [`Classifier`] watches the packet rate of every generalisation of each
//! packet's 4-tuple (the exact tuple, its source subnet, any source port, ...;
//! twelve in all, see [`lattice`]) with count-min sketches of EWMA rates, and
//! limits floods at the most specific generalisation that explains them:
//! a flood from one address and port is held to the limit while the rest of
//! its subnet is untouched; a reflection attack from thousands of addresses
//! but one source port is held as one stream. Every drop says why
//! ([`Verdict`], [`Limited`]).
//!
//! * [`Classifier`] / [`ClassifierBuilder`] — the limiter, with injectable clock and
//!   randomness for deterministic tests.
//! * [`FourTuple`] — the input, from socket addresses or parsed from raw
//!   IPv4/IPv6 UDP packets ([`mod@tuple`]).
//! * `udp` (feature `tokio`, on by default) — a guarded tokio UDP socket
//!   that drops flood packets before the application sees them.
//! * `kernel` (feature `bpf`) — the same filter as a BPF socket filter,
//!   dropping floods in the kernel.
//! * [`sim`] — replay the paper's scenarios (floods beside legitimate
//!   streams) on a simulated clock.
//! * Feature `metrics` — the counts through the `metrics` facade,
//!   published on demand (nothing per packet): packets passed and dropped
//!   per level and generalisation and `classify_packet`'s parse outcomes
//!   (`Classifier::publish_metrics`: `weir_hhh_unlimited_packets_total`,
//!   `weir_hhh_limited_packets_total`, `weir_hhh_parsed_packets_total`),
//!   and the kernel filter's counters (`KernelFilter::publish_metrics`:
//!   `weir_hhh_kernel_*`).
//!
//! ```
//! use weir_hhh::{Classifier, FourTuple, Verdict};
//!
//! let rake = Classifier::try_new(100).unwrap(); // packets per second
//! let tuple = FourTuple::from_socket_addrs(
//!     "203.0.113.9:40000".parse().unwrap(),
//!     "192.0.2.1:443".parse().unwrap(),
//! );
//! match rake.classify(&tuple) {
//!     Verdict::Drop(why) => eprintln!("dropped: {why}"),
//!     _ => { /* deliver */ }
//! }
//! ```

mod classifier;
mod error;
#[cfg(feature = "bpf")]
pub mod kernel;
pub mod lattice;
pub mod random;
pub mod sim;
mod sync;
#[cfg(feature = "metrics")]
mod telemetry;
pub mod tuple;
// tokio compiles its networking out under `--cfg loom`.
#[cfg(all(feature = "tokio", not(loom)))]
pub mod udp;

/// The clocks a [`Classifier`] reads ([`ClassifierBuilder::clock`]), re-exported so
/// depending on weir-hhh is enough to drive one by hand.
pub mod clock {
    pub use weir_limits::clock::{Clock, ManualClock, MonotonicClock, StdClock, Timestamp};
}

/// Sketch shapes ([`ClassifierBuilder::shape`]) and the locator a [`Classifier`]
/// exposes, re-exported from weir-limits.
pub mod sketch {
    pub use weir_limits::sketch::{Location, Locator};
    pub use weir_limits::{Layout, Shape};
}

pub use classifier::{
    Classifier, ClassifierBuilder, DEFAULT_WINDOW, DEFAULT_WINDOW_GROWTH, LevelStats, Limited,
    Stats, Verdict,
};
pub use error::ClassifierConfigError;
pub use lattice::{AddrScope, Generalisation, PortScope, Prefixes};
pub use tuple::{Attribution, FourTuple, ParseError};
/// The sketch and window errors a [`ClassifierConfigError::Limits`] carries.
pub use weir_limits::ConfigError;
pub use weir_rate::ewma::FixedRate;
