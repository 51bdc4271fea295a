//! The handshake that stops a manager's sweeper before `fork()`.
//!
//! The pauser ([`PauseGate::request`], then [`PauseGate::acknowledged`]
//! until it says so) must learn that the sweeper is outside any sweep, so
//! holds no table or bucket lock, and will not start one until
//! [`PauseGate::resume`]. The sweeper calls [`PauseGate::enter_sweep`] at
//! each loop turn, before touching anything.
//!
//! Why an acknowledgement cannot be stale: `enter_sweep` stores `RUNNING`
//! *before* it reads the request, and the pauser reads the state *after*
//! storing the request (all `SeqCst`). So a `PAUSED` left from an earlier
//! pause is overwritten before any sweep starts, and the sweep that
//! overwrote it then reads the new request and pauses. The loom model
//! `an_acknowledged_pause_holds_no_sweep` checks this.
//!
//! A request names the process that made it: in a forked child the
//! inherited request concerns the parent's sweeper, and the child's own
//! sweeper ignores it.

use crate::sync::{AtomicU8, AtomicU64, Ordering};

const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const IDLE: u8 = 2;
const PAUSED: u8 = 3;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PauseGate {
    /// Process id that asked its sweeper to pause (0: none).
    requested: AtomicU64,
    state: AtomicU8,
}

impl PauseGate {
    pub(crate) fn new() -> Self {
        Self {
            requested: AtomicU64::new(0),
            state: AtomicU8::new(NOT_STARTED),
        }
    }

    /// Ask the sweeper of process `pid` to stop.
    pub(crate) fn request(&self, pid: u32) {
        self.requested.store(u64::from(pid), Ordering::SeqCst);
    }

    /// Whether the sweeper has stopped since the last [`request`](Self::request).
    pub(crate) fn acknowledged(&self) -> bool {
        self.state.load(Ordering::SeqCst) == PAUSED
    }

    /// Withdraw the request.
    pub(crate) fn resume(&self) {
        self.requested.store(0, Ordering::SeqCst);
    }

    /// A sweeper was (re)started and will sweep.
    pub(crate) fn started(&self) {
        self.state.store(RUNNING, Ordering::SeqCst);
    }

    /// The sweeper of process `pid` is about to sweep: `false` if it must
    /// park instead (it has acknowledged a pause).
    pub(crate) fn enter_sweep(&self, pid: u32) -> bool {
        self.state.store(RUNNING, Ordering::SeqCst);
        if self.requested.load(Ordering::SeqCst) == u64::from(pid) {
            self.state.store(PAUSED, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The sweeper found nothing armed and parks until unparked.
    pub(crate) fn idle(&self) {
        self.state.store(IDLE, Ordering::SeqCst);
    }
}
