//! Whether a check spends what it allows: the one switch between a check
//! and a peek.

/// Whether a check spends what it allows.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, Algorithm, Mode, Quota};
///
/// let gcra = Gcra::new(Quota::per_second(NonZeroU32::MIN));
/// let mut state = gcra.new_state(0);
/// assert!(gcra.check(&mut state, 0, 1, Mode::Peek).unwrap().is_allowed());
/// // The peek spent nothing: the one unit is still there.
/// assert!(gcra.check(&mut state, 0, 1, Mode::Consume).unwrap().is_allowed());
/// assert!(!gcra.check(&mut state, 0, 1, Mode::Consume).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Spend the cost when the request is allowed (a normal check).
    #[default]
    Consume,
    /// Report what would happen without changing anything.
    Peek,
}
