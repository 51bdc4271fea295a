//! [`AnyAlgorithm`]: an algorithm chosen at run time, from configuration.

use super::{Aimd, Algorithm, ConfigError, Constant, Gradient2, Sample, Vegas};
use crate::clock::Timestamp;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

/// One of the algorithms, chosen at run time: a limiter's type stays the
/// same whichever a configuration file names.
///
/// Parsed from `aimd`, `vegas`, `gradient2` (each with its defaults) or
/// `constant:<limit>` (`fixed:<limit>` reads the same), case-insensitively;
/// build one with settings of its own by wrapping it.
///
/// ```
/// use std::num::NonZeroUsize;
/// use weir_adaptive::{Algorithm, AnyAlgorithm, KeyedAdaptiveLimiter, Vegas};
///
/// let from_config: AnyAlgorithm = "gradient2".parse()?;
/// let tuned = AnyAlgorithm::Vegas(Vegas::builder().alpha(2).beta(4).build()?);
/// let constant: AnyAlgorithm = "constant:64".parse()?;
/// assert_eq!(constant.limit(), 64);
/// let per_origin = KeyedAdaptiveLimiter::new(from_config, NonZeroUsize::new(64).unwrap());
/// # let _ = (tuned, per_origin);
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AnyAlgorithm {
    /// [`Aimd`].
    Aimd(Aimd),
    /// [`Vegas`].
    Vegas(Vegas),
    /// [`Gradient2`].
    Gradient2(Gradient2),
    /// [`Constant`].
    Constant(Constant),
}

impl Algorithm for AnyAlgorithm {
    fn limit(&self) -> u32 {
        match self {
            Self::Aimd(a) => a.limit(),
            Self::Vegas(a) => a.limit(),
            Self::Gradient2(a) => a.limit(),
            Self::Constant(a) => a.limit(),
        }
    }

    fn update<C>(&mut self, now: Timestamp<C>, sample: Sample) {
        match self {
            Self::Aimd(a) => a.update(now, sample),
            Self::Vegas(a) => a.update(now, sample),
            Self::Gradient2(a) => a.update(now, sample),
            Self::Constant(a) => a.update(now, sample),
        }
    }

    fn no_load(&self) -> Option<Duration> {
        match self {
            Self::Aimd(a) => a.no_load(),
            Self::Vegas(a) => a.no_load(),
            Self::Gradient2(a) => a.no_load(),
            Self::Constant(a) => a.no_load(),
        }
    }

    fn next_tick(&self) -> Option<u64> {
        match self {
            Self::Aimd(a) => a.next_tick(),
            Self::Vegas(a) => a.next_tick(),
            Self::Gradient2(a) => a.next_tick(),
            Self::Constant(a) => a.next_tick(),
        }
    }

    fn tick<C>(&mut self, now: Timestamp<C>) {
        match self {
            Self::Aimd(a) => a.tick(now),
            Self::Vegas(a) => a.tick(now),
            Self::Gradient2(a) => a.tick(now),
            Self::Constant(a) => a.tick(now),
        }
    }
}

impl FromStr for AnyAlgorithm {
    type Err = ConfigError;

    /// # Errors
    ///
    /// [`ConfigError::UnknownAlgorithm`] for a name other than `aimd`,
    /// `vegas`, `gradient2` or `constant:<limit>` (also read as
    /// `fixed:<limit>`) with a limit of at least 1.
    fn from_str(name: &str) -> Result<Self, ConfigError> {
        let unknown = || ConfigError::UnknownAlgorithm(name.to_owned());
        let lower = name.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "aimd" => Self::Aimd(Aimd::default()),
            "vegas" => Self::Vegas(Vegas::default()),
            "gradient2" => Self::Gradient2(Gradient2::default()),
            other => {
                let limit = other
                    .strip_prefix("constant:")
                    .or_else(|| other.strip_prefix("fixed:"))
                    .ok_or_else(unknown)?;
                let limit: NonZeroU32 = limit.trim().parse().map_err(|_| unknown())?;
                Self::Constant(Constant::new(limit))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_defaults() {
        assert_eq!("Vegas".parse(), Ok(AnyAlgorithm::Vegas(Vegas::default())));
        assert_eq!(" aimd ".parse(), Ok(AnyAlgorithm::Aimd(Aimd::default())));
        assert_eq!(
            "gradient2".parse(),
            Ok(AnyAlgorithm::Gradient2(Gradient2::default()))
        );
        let constant: AnyAlgorithm = "constant: 12".parse().unwrap();
        assert_eq!(constant.limit(), 12);
        let fixed: AnyAlgorithm = "fixed: 12".parse().unwrap();
        assert_eq!(fixed, constant);
        for bad in ["", "gradient", "constant:0", "fixed:", "fixed:-3"] {
            let err = bad.parse::<AnyAlgorithm>().unwrap_err();
            assert_eq!(err, ConfigError::UnknownAlgorithm(bad.to_owned()));
            assert_eq!(err.setting(), "algorithm");
            assert!(err.to_string().contains(bad.trim()), "{err}");
        }
    }
}
