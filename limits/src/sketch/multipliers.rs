//! The per-row multipliers of the rows layout.

use super::MAX_HASHES;

/// One odd multiplier per row (the first is 1: row 0 uses the hash as is).
/// Fixed constants are enough: the hash itself is randomly seeded.
///
/// Public so that a re-implementation outside Rust (weir-hhh's BPF filter)
/// locates the same cells: row `i` of a [`Layout::Rows`](crate::Layout::Rows) key with hash `h`
/// is cell `i·slots + ⌊(h·ROW_MULTIPLIERS[i] mod 2⁶⁴)·slots / 2⁶⁴⌋`.
///
/// ```
/// use weir_limits::Shape;
/// use weir_limits::sketch::{Locator, ROW_MULTIPLIERS};
///
/// let locator = Locator::new(Shape::rows::<2, 1024>().with_seed(1));
/// let h = 0x0123_4567_89ab_cdef_u64;
/// let row1 = (u128::from(h.wrapping_mul(ROW_MULTIPLIERS[1])) * 1024 >> 64) as usize;
/// assert_eq!(locator.locate_hash(h).iter().nth(1), Some(1024 + row1));
/// ```
pub const ROW_MULTIPLIERS: [u64; MAX_HASHES] = [
    0x0000_0000_0000_0001,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x27d4_eb2f_1656_67c5,
    0xff51_afd7_ed55_8ccd,
    0xc4ce_b9fe_1a85_ec53,
    0x8765_4321_0fed_cba9,
];
