//! Timers as a user meets them: `timeout` and `sleep` against every known
//! fault of pingora-timeout, deadlines given as instants, tokio's paused
//! test clock, runtimes without a time driver, the `metrics` feature's
//! figures, and the pingora drop-in's signatures and behaviour.

mod behaviour;
mod deadline;
mod metrics;
mod no_time_driver;
mod paused_clock;
mod pingora;
