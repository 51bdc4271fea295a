//! The paper's scenarios and rakelimit's own checks, on a simulated clock
//! and again over real UDP sockets on loopback, and the shipped echo
//! example against a hostile datagram; the `metrics` feature's series
//! against the verdicts.

mod echo_example;
mod loopback;
mod metrics;
mod simulated;
