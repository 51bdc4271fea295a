//! What the Rust side shares with `bpf/filter.c`: the compiled object, its
//! program names, and `repr(C)` mirrors of the C structs in its maps and
//! read-only data, with the configuration derived from a classifier's
//! [`Params`].
//!
//! Every constant the kernel and the classifier must agree on (EWMA
//! constants per level, hash keys, masks, row multipliers) comes from user
//! space in the program's read-only data, set before it is verified, so the
//! verifier sees constants; the C file holds only the arithmetic and the
//! lattice (which is the algorithm, not configuration). The object holds
//! one program for any layout and programs compiled for the common ones (1,
//! 2, 3 or 4 cells per key in rows, 1, 2 or 4 in blocks, a power-of-two
//! width, the default among them), in which the cell loop unrolls to
//! straight-line code; [`Config::program`] picks the one that fits. With
//! the time and the coin pinned (`KernelFilter::test_run_at`, feature
//! `test-util`), the kernel's verdicts equal the classifier's packet for
//! packet; `tests/kernel/` checks it.

use super::KernelError;
use crate::classifier::Params;
use crate::lattice::{GENERALISATIONS, LEVELS};
use weir_limits::Layout;
use weir_limits::ewma::FixedRate;
use weir_limits::sketch::{LANES, ROW_MULTIPLIERS};

/// The compiled filter (`bpf/filter.c`, built by `build.rs`).
pub(super) static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/filter.o"));

/// The most cells per key the kernel filter supports (`MAX_HASHES` in
/// `bpf/filter.c`).
pub(super) const MAX_KERNEL_HASHES: usize = 8;

/// The general program, for any layout the kernel supports.
pub(super) const GENERAL_PROGRAM: &str = "weir_filter_any";
/// `weir_state.flags`: take the time from `now` instead of the kernel clock.
#[cfg(any(test, feature = "test-util"))]
pub(super) const FLAG_REPLAY_CLOCK: u64 = 1;
/// `weir_state.flags`: take the coin from `coin` instead of
/// `bpf_get_prandom_u32`.
#[cfg(any(test, feature = "test-util"))]
pub(super) const FLAG_REPLAY_COIN: u64 = 2;

/// `struct weir_level` in `bpf/filter.c`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(super) struct Level {
    pub(super) window: u64,
    pub(super) recip: u64,
    pub(super) inc: u64,
}

/// `struct weir_config`: the program's read-only global `weir_cfg`, set at
/// load (so the verifier sees every field as a constant).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Config {
    pub(super) hashes: u64,
    pub(super) slots: u64,
    pub(super) slots_shift: u64,
    pub(super) blocked: u64,
    pub(super) cells_per_sketch: u64,
    pub(super) one_per_ns: u64,
    pub(super) v6_fold: [u64; 2],
    pub(super) v4_mask: [u64; 3],
    pub(super) v6_mask_hi: [u64; 3],
    pub(super) v6_mask_lo: [u64; 3],
    pub(super) row_mult: [u64; MAX_KERNEL_HASHES],
    pub(super) keys_v4: [[u64; 2]; GENERALISATIONS],
    pub(super) keys_v6: [[u64; 2]; GENERALISATIONS],
    pub(super) levels: [Level; LEVELS],
}

/// `struct weir_state`: what changes at run time.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(super) struct State {
    pub(super) limit: u64,
    pub(super) flags: u64,
    pub(super) now: u64,
    pub(super) coin: u64,
}

/// `struct weir_stats`, one per CPU.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(super) struct RawStats {
    pub(super) unlimited: u64,
    pub(super) passed: [u64; LEVELS],
    pub(super) dropped: [u64; LEVELS],
    pub(super) unparsed: u64,
    pub(super) ports_unknown: u64,
}

/// `struct weir_cell`: an EWMA rate (FixedRate bits) and its last update.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(super) struct RawCell {
    pub(super) rate: u64,
    pub(super) stamp: u64,
}

// The C structs have the same sizes (aya also checks each map's value size
// against these when the maps are opened).
const _: () = assert!(size_of::<Config>() == 704);
const _: () = assert!(size_of::<State>() == 32);
const _: () = assert!(size_of::<RawStats>() == 104);
const _: () = assert!(size_of::<RawCell>() == 16);

// SAFETY: plain `repr(C)` structs of integers with no padding (sizes
// asserted above); any bit pattern is a valid value.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for State {}
// SAFETY: as above.
unsafe impl aya::Pod for RawStats {}
// SAFETY: as above (two u64, 16 bytes).
unsafe impl aya::Pod for RawCell {}

impl Config {
    pub(super) fn new(p: &Params) -> Result<Self, KernelError> {
        let hashes = p.locator.hashes();
        if hashes > MAX_KERNEL_HASHES {
            return Err(KernelError::Unsupported("more than 8 cells per key"));
        }
        let blocked = p.locator.layout() == Layout::Blocked;
        // What `reduce` scales onto: a row's width, or the number of blocks.
        let slots = if blocked {
            (p.locator.cells() / LANES) as u64
        } else {
            p.locator.slots() as u64
        };
        // `params()` bounds the twelve sketches to u32::MAX cells.
        let cells_per_sketch = p.cells_per_sketch() as u64;
        // reduce(h, 2^k) = h >> (64 - k): one shift instead of a 128-bit product.
        let slots_shift = if slots >= 2 && slots.is_power_of_two() {
            64 - u64::from(slots.trailing_zeros())
        } else {
            0
        };
        let mut row_mult = [0; MAX_KERNEL_HASHES];
        row_mult.copy_from_slice(&ROW_MULTIPLIERS[..MAX_KERNEL_HASHES]);
        let key = |k: &(u64, u64)| [k.0, k.1];
        Ok(Self {
            hashes: hashes as u64,
            slots,
            slots_shift,
            blocked: u64::from(blocked),
            cells_per_sketch,
            one_per_ns: FixedRate::from_per_second(1_000_000_000).to_bits(),
            v6_fold: key(&p.keys.v6_addr),
            v4_mask: p.v4_masks.map(u64::from),
            v6_mask_hi: p.v6_masks.map(|m| (m >> 64) as u64),
            v6_mask_lo: p.v6_masks.map(|m| m as u64),
            row_mult,
            keys_v4: p.keys.v4.each_ref().map(key),
            keys_v6: p.keys.v6.each_ref().map(key),
            levels: p.windows.map(|w| Level {
                window: w.window_nanos(),
                recip: w.reciprocal(),
                inc: w.increment(),
            }),
        })
    }
}

impl Config {
    /// The program to run: one compiled for this layout when there is one
    /// (1–4 cells per key, a power-of-two width), else the general one.
    pub(super) fn program(&self) -> &'static str {
        const ROWS: [&str; 4] = [
            "weir_filter_rows_1",
            "weir_filter_rows_2",
            "weir_filter_rows_3",
            "weir_filter_rows_4",
        ];
        // (Three cells per key never make a power-of-two number of blocks.)
        const BLOCKED: [&str; 4] = [
            "weir_filter_blocked_1",
            "weir_filter_blocked_2",
            GENERAL_PROGRAM,
            "weir_filter_blocked_4",
        ];
        let specialised = if self.blocked != 0 { &BLOCKED } else { &ROWS };
        match self.hashes {
            1..=4 if self.slots_shift != 0 => specialised[self.hashes as usize - 1],
            _ => GENERAL_PROGRAM,
        }
    }
}
