//! weir-rate's limiters against their guarantees: each algorithm's bound
//! (proptests, refunds and charges included), keyed and sketch limiters
//! against exact references, hostile keys and times, settling, sizing and
//! waits.

mod attacks;
mod bounds;
mod cached_tiers;
mod keyed;
mod settle;
mod sizing;
mod spec;
mod tiered_sketch;
mod tiers;
mod wait;
mod windows;
