//! weir-limits at its public entry points: extreme durations, costs and
//! dimensions (typed errors or documented outcomes, never a panic), and the
//! pingora drop-in's signatures and behaviour.

mod attacks;
mod pingora;
