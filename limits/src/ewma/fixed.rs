//! [`FixedRate`]: a rate in one atomic word.

use std::fmt;

/// A rate in events per second, unsigned, with 16 fractional bits.
///
/// ```
/// use weir_limits::ewma::FixedRate;
///
/// let r = FixedRate::from_per_second(3);
/// assert_eq!(r.as_f64(), 3.0);
/// assert_eq!(FixedRate::from_f64(0.5).as_f64(), 0.5);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FixedRate(pub(super) u64);

impl FixedRate {
    /// Number of fractional bits: a rate is kept as `value · 2¹⁶` in a
    /// `u64` (see [`to_bits`](Self::to_bits)).
    pub const FRAC_BITS: u32 = 16;
    /// Zero events per second.
    pub const ZERO: Self = Self(0);
    /// The smallest positive rate, 2⁻¹⁶ events per second.
    pub const EPSILON: Self = Self(1);
    /// The largest representable rate (≈ 2.8·10¹⁴ events per second).
    pub const MAX: Self = Self(u64::MAX);

    /// The rate whose raw representation is `bits` (value · 2¹⁶): for
    /// rates kept outside this type (a kernel map, a store), as weir-hhh's
    /// BPF filter keeps them.
    ///
    /// ```
    /// use weir_limits::ewma::FixedRate;
    ///
    /// let rate = FixedRate::from_per_second(3);
    /// assert_eq!(rate.to_bits(), 3 << FixedRate::FRAC_BITS);
    /// assert_eq!(FixedRate::from_bits(rate.to_bits()), rate);
    /// ```
    #[inline]
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The raw representation (value · 2¹⁶), as
    /// [`from_bits`](Self::from_bits) takes it.
    #[inline]
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// `per_second` events per second, saturating at [`FixedRate::MAX`].
    #[inline]
    pub const fn from_per_second(per_second: u64) -> Self {
        if per_second > (u64::MAX >> Self::FRAC_BITS) {
            Self::MAX
        } else {
            Self(per_second << Self::FRAC_BITS)
        }
    }

    /// The nearest fixed-point rate below `per_second`; negative and NaN
    /// give zero, huge values saturate.
    #[inline]
    pub fn from_f64(per_second: f64) -> Self {
        // `as` saturates and maps NaN to 0.
        Self((per_second * (1u64 << Self::FRAC_BITS) as f64) as u64)
    }

    /// The rate as a float, in events per second.
    #[inline]
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / (1u64 << Self::FRAC_BITS) as f64
    }

    /// Whole events per second, rounded down.
    ///
    /// ```
    /// use weir_limits::ewma::FixedRate;
    ///
    /// assert_eq!(FixedRate::from_f64(2.75).whole_per_second(), 2);
    /// ```
    #[inline]
    pub const fn whole_per_second(self) -> u64 {
        self.0 >> Self::FRAC_BITS
    }
}

impl fmt::Display for FixedRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.as_f64())
    }
}
