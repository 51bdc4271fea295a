//! Internal to weir: the primitives that weir's crates share, written once.
//!
//! **This crate is an implementation detail of weir's published crates.
//! It has no stability promise: any release may change or remove anything
//! in it. Depend on those crates instead.**
//!
//! * [`sync`]: the spin lock for critical sections of a few instructions,
//!   the spin-then-yield [`Backoff`](sync::Backoff) and a parking
//!   [`Mutex`](sync::Mutex); all are loom's under `--cfg loom`, so the
//!   models of the crates above check them.
//! * [`shards`]: a value split by key hash into shards on cache lines of
//!   their own, the skeleton of every keyed table.
//! * [`biased`]: a lock whose owner thread takes it without a
//!   read-modify-write, and others after revoking that bias once.
//! * [`local`]: per-thread values with a cache of the last one handed out.
//! * [`tsc`]: the process's one time-stamp counter, calibrated once against
//!   the OS clock, with an accurate scale (for clocks) and a lower bound on
//!   its rate (for windows that must close early, never late).
//! * [`fork`]: hooks run in a forked child.
//! * [`time`]: saturating duration arithmetic.
//! * [`random`]: the SplitMix64 generator and mixer.

pub mod biased;
pub mod fork;
pub mod local;
pub mod random;
pub mod shards;
pub mod sync;
pub mod time;
pub mod tsc;
