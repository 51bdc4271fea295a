//! The harness that checks the kernel filter against the classifier
//! (feature `test-util`, hidden from the documentation): runs of the
//! program under `BPF_PROG_TEST_RUN`, on the kernel's clock and coin or on
//! replayed ones, and reads of its sketches.

use super::KernelFilter;
use super::abi::{FLAG_REPLAY_CLOCK, FLAG_REPLAY_COIN, State};
use super::error::KernelError;
use crate::lattice::{Generalisation, LEVELS};
use crate::tuple::FourTuple;
use aya::programs::{TestRun, TestRunOptions};
use std::time::Duration;
use weir_limits::ewma::FixedRate;

#[cfg(doc)]
use crate::classifier::Classifier;

/// One `BPF_PROG_TEST_RUN` of the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRunResult {
    /// What the program returned: bytes to keep, 0 to drop.
    pub return_value: u32,
    /// Mean time per run, as the kernel measured it.
    pub duration: Duration,
}

impl TestRunResult {
    /// Whether the packet was kept.
    pub fn passed(&self) -> bool {
        self.return_value != 0
    }
}

impl KernelFilter {
    /// Run the filter `repeat` times on `frame` with `BPF_PROG_TEST_RUN`, on
    /// the kernel's clock and coin. The frame starts at the Ethernet header
    /// (`test_util::ethernet_frame`): the kernel strips it and, as on a
    /// socket, the filter reads from the IP header. The reported duration
    /// is the kernel's mean per run.
    ///
    /// # Errors
    ///
    /// A [`KernelError`] when the system call fails.
    // Hidden: a test fixture (feature `test-util`), as the module is.
    #[doc(hidden)]
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRunResult, KernelError> {
        let opts = TestRunOptions {
            data_in: Some(frame),
            repeat: repeat.max(1),
            ..TestRunOptions::default()
        };
        let result = self
            .program()?
            .test_run(opts)
            .map_err(|e| KernelError::program("BPF_PROG_TEST_RUN", e))?;
        Ok(TestRunResult {
            return_value: result.return_value,
            duration: result.duration,
        })
    }

    /// Run the filter once on `frame` as if it arrived at `now_nanos`, with
    /// the lottery's coin fixed to `coin` if given (else
    /// `bpf_get_prandom_u32`): deterministic replays, e.g. to compare with
    /// [`Classifier::classify_at`] fed the same times and a
    /// [`ConstantRandom`](crate::random::ConstantRandom).
    /// The replayed time stands for the kernel clock's reading: a cell
    /// stamped a window or more after it is taken for a wild time's and
    /// moved back to it, where the classifier judges that against its own
    /// clock (a merely stale `classify_at` time keeps the stamp; see its
    /// docs). So replays agree when their times are in order, or when the
    /// classifier's clock reads the replayed times.
    /// The kernel clock is restored afterwards, but sockets the filter is
    /// attached to see the replayed time meanwhile: replay on a filter of
    /// its own.
    ///
    /// # Errors
    ///
    /// A [`KernelError`] when a system call fails.
    // Hidden: a test fixture (feature `test-util`), as the module is.
    #[doc(hidden)]
    pub fn test_run_at(
        &mut self,
        frame: &[u8],
        now_nanos: u64,
        coin: Option<u32>,
    ) -> Result<TestRunResult, KernelError> {
        let live = self.state;
        self.write_state(State {
            flags: FLAG_REPLAY_CLOCK | coin.map_or(0, |_| FLAG_REPLAY_COIN),
            now: now_nanos,
            coin: u64::from(coin.unwrap_or(0)),
            ..live
        })?;
        let result = self.test_run(frame, 1);
        self.write_state(live)?;
        result
    }

    /// The kernel's estimated rate of `tuple` under one generalisation at
    /// `now_nanos` on the kernel clock (`CLOCK_MONOTONIC`, or the replayed
    /// time), decayed since the last update; as
    /// [`Classifier::estimate_at`], read from the kernel's sketches.
    ///
    /// # Errors
    ///
    /// A [`KernelError`] when the sketches cannot be read.
    // Hidden: a test fixture (feature `test-util`), as the module is.
    #[doc(hidden)]
    pub fn estimate_at(
        &self,
        tuple: &FourTuple,
        generalisation: Generalisation,
        now_nanos: u64,
    ) -> Result<FixedRate, KernelError> {
        let g = generalisation.index();
        let hash = self.params.hash(tuple, g);
        let window = self.params.windows[usize::from(generalisation.level())].window();
        let base = g * self.params.cells_per_sketch();
        let mut min = FixedRate::MAX;
        for i in self.params.locator.locate_hash(hash).iter() {
            let index = u32::try_from(base + i)
                .map_err(|_| KernelError::Unsupported("more cells than a BPF array holds"))?;
            let cell = self
                .cells_map
                .get(&index, 0)
                .map_err(|e| KernelError::map("reading the sketches", e))?;
            let rate = window.decay_fixed(
                FixedRate::from_bits(cell.rate),
                now_nanos.saturating_sub(cell.stamp),
            );
            min = min.min(rate);
        }
        Ok(min)
    }

    /// The EWMA window of each level (as the classifier's
    /// [`level_windows`](Classifier::level_windows)).
    // Hidden: a test fixture (feature `test-util`), as the module is.
    #[doc(hidden)]
    pub fn level_windows(&self) -> [Duration; LEVELS] {
        self.config.levels.map(|l| Duration::from_nanos(l.window))
    }
}
