//! Limits as data (feature `serde`): quotas, algorithms, all-or-nothing
//! sets and tiers in the form a configuration file gives them, checked
//! into weir-rate's typed values.
//!
//! A file (TOML here; any serde format works) names a limit by its
//! algorithm, its limit, its window and, where it has them, its burst and
//! counters:
//!
//! ```
//! use weir_rate::spec::TiersSpec;
//! use weir_rate::{Gcra, TieredLimiter};
//!
//! let file = r#"
//!     default = "free"
//!     [tiers]
//!     free = { algorithm = "gcra", limit = 10, per = "1s", burst = 20 }
//!     paid = { algorithm = "gcra", limit = 100, per = "1s" }
//!     internal = "unlimited"
//! "#;
//! let spec: TiersSpec = toml::from_str(file)?;
//! let limiter = TieredLimiter::<String, Gcra, _>::try_new(
//!     spec.tiers()?,
//!     &spec.default,
//!     |key: &str| key.starts_with("pk_").then_some("paid"),
//! )?;
//! assert_eq!(limiter.tiers(), ["free", "internal", "paid"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`LimitSpec`] is one limit, [`LimitsSpec`] one limit or a list of them
//! (all-or-nothing), [`TierSpec`] a tier's limits or `"unlimited"`, and
//! [`TiersSpec`] the tiers with the default's name. Each turns into the
//! typed value by a method that checks it ([`FromSpec`] for the
//! algorithms): what the typed constructors refuse is refused here with
//! the same [`ConfigError`], inside a [`SpecError`] that names the field
//! (`tiers.paid.limit: a quota of zero units per window allows nothing`).
//! Windows are written `250ms`, `1s`, `15m`, `1h` or `1d` ([`Period`]).

use crate::algorithms::{FixedWindow, Gcra, SlidingLog, SlidingWindow, TokenBucket};
use crate::config::ConfigError;
use crate::quota::Quota;
use crate::tiers::Tier;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

/// An algorithm by its name in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmName {
    /// [`Gcra`].
    Gcra,
    /// [`TokenBucket`].
    TokenBucket,
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingWindow`] (`counters`, 2 unless given).
    SlidingWindow,
    /// [`SlidingLog`].
    SlidingLog,
}

impl AlgorithmName {
    /// The name as a file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token_bucket",
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindow => "sliding_window",
            Self::SlidingLog => "sliding_log",
        }
    }
}

/// A window's length as a file writes it: a whole number and a unit, `ns`,
/// `us`, `ms`, `s`, `m`, `h` or `d` (`250ms`, `1s`, `1d`).
///
/// ```
/// use std::time::Duration;
/// use weir_rate::spec::Period;
///
/// assert_eq!("15m".parse::<Period>().unwrap().0, Duration::from_secs(900));
/// assert!("1 fortnight".parse::<Period>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period(pub Duration);

impl std::str::FromStr for Period {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = text.split_at(digits);
        let n: u64 = number
            .parse()
            .map_err(|_| format!("`{text}` is not a number and a unit (such as `1s`)"))?;
        let per_unit: u64 = match unit.trim() {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "d" => 86_400 * 1_000_000_000,
            other => {
                return Err(format!(
                    "`{other}` is not a unit of time (ns, us, ms, s, m, h, d)"
                ));
            }
        };
        let nanos = n
            .checked_mul(per_unit)
            .ok_or_else(|| format!("`{text}` is longer than 584 years"))?;
        Ok(Self(Duration::from_nanos(nanos)))
    }
}

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One limit as a file gives it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    /// The algorithm.
    pub algorithm: AlgorithmName,
    /// Units per window.
    pub limit: u32,
    /// The window.
    pub per: Period,
    /// The burst (GCRA, the token bucket), the limit unless given.
    #[serde(default)]
    pub burst: Option<u32>,
    /// The counters of a sliding window, 2 unless given.
    #[serde(default)]
    pub counters: Option<u32>,
}

/// One limit, or a list of them checked all-or-nothing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum LimitsSpec {
    /// One limit.
    One(LimitSpec),
    /// Limits all-or-nothing, in their order.
    AllOf(Vec<LimitSpec>),
}

impl LimitsSpec {
    /// The limits, in their order.
    pub fn limits(&self) -> &[LimitSpec] {
        match self {
            Self::One(one) => std::slice::from_ref(one),
            Self::AllOf(all) => all,
        }
    }
}

/// A tier: its limits, or `"unlimited"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TierSpec {
    /// The string `"unlimited"`.
    Unlimited(Unlimited),
    /// The tier's limits.
    Limits(LimitsSpec),
}

/// The word `unlimited`, as a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unlimited {
    /// No limit.
    Unlimited,
}

/// Tiers by name and the default's name, as a file gives them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TiersSpec {
    /// The tier of keys in no tier.
    pub default: String,
    /// The tiers, by name.
    pub tiers: BTreeMap<String, TierSpec>,
}

/// Why a limit in a file could not be built, and where: the field's path
/// (`tiers.paid.limit`) and the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    field: String,
    why: Why,
}

#[derive(Debug, Clone, PartialEq)]
enum Why {
    Config(ConfigError),
    Algorithm {
        expected: &'static str,
        found: AlgorithmName,
    },
    Unused,
    Count {
        expected: usize,
        found: usize,
    },
}

impl SpecError {
    fn at(field: impl Into<String>, why: Why) -> Self {
        Self {
            field: field.into(),
            why,
        }
    }

    /// An algorithm at `field` that the reader cannot take: `found`, where
    /// `expected` (as a phrase: "an algorithm a store keeps") is needed.
    ///
    /// ```
    /// use weir_rate::spec::{AlgorithmName, SpecError};
    ///
    /// let e = SpecError::unexpected_algorithm("limits.api.algorithm", AlgorithmName::SlidingLog, "an algorithm a store keeps");
    /// assert_eq!(e.to_string(), "limits.api.algorithm: `sliding_log` where an algorithm a store keeps is needed");
    /// ```
    pub fn unexpected_algorithm(
        field: impl Into<String>,
        found: AlgorithmName,
        expected: &'static str,
    ) -> Self {
        Self::at(field, Why::Algorithm { expected, found })
    }

    /// The path of the field at fault, such as `tiers.paid.limit`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The typed constructors' own error for this field, when it is one of
    /// theirs (a zero rate, a zero window, a zero burst, bad counters).
    pub fn config(&self) -> Option<&ConfigError> {
        match &self.why {
            Why::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field)?;
        match &self.why {
            Why::Config(e) => write!(f, "{e}"),
            Why::Algorithm { expected, found } => {
                write!(f, "`{}` where {expected} is needed", found.as_str())
            }
            Why::Unused => f.write_str("not a setting of this algorithm"),
            Why::Count { expected, found } => write!(
                f,
                "{found} limits where {expected} are needed (a list checks them all-or-nothing)"
            ),
        }
    }
}

impl std::error::Error for SpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.why {
            Why::Config(e) => Some(e),
            _ => None,
        }
    }
}

fn join(field: &str, name: &str) -> String {
    if field.is_empty() {
        name.to_owned()
    } else {
        format!("{field}.{name}")
    }
}

impl LimitSpec {
    /// The quota: `limit` per `per`, with `burst` if given.
    ///
    /// # Errors
    ///
    /// A [`SpecError`] at `field.limit` for a zero limit
    /// ([`ConfigError::ZeroRate`]), at `field.per` for a zero or too long
    /// window, at `field.burst` for a zero burst.
    pub fn quota(&self, field: &str) -> Result<Quota, SpecError> {
        let quota = Quota::try_new(self.limit, self.per.0).map_err(|e| {
            let at = if e == ConfigError::ZeroRate {
                "limit"
            } else {
                "per"
            };
            SpecError::at(join(field, at), Why::Config(e))
        })?;
        match self.burst {
            None => Ok(quota),
            Some(burst) => {
                let burst = NonZeroU32::new(burst).ok_or_else(|| {
                    SpecError::at(join(field, "burst"), Why::Config(ConfigError::ZeroBurst))
                })?;
                Ok(quota.allow_burst(burst))
            }
        }
    }

    /// That this limit is `expected`, and sets nothing its algorithm does
    /// not have.
    fn expect(&self, field: &str, expected: AlgorithmName) -> Result<Quota, SpecError> {
        if self.algorithm != expected {
            return Err(SpecError::at(
                join(field, "algorithm"),
                Why::Algorithm {
                    expected: expected.as_str(),
                    found: self.algorithm,
                },
            ));
        }
        let bursts = matches!(expected, AlgorithmName::Gcra | AlgorithmName::TokenBucket);
        if self.burst.is_some() && !bursts {
            return Err(SpecError::at(join(field, "burst"), Why::Unused));
        }
        if self.counters.is_some() && expected != AlgorithmName::SlidingWindow {
            return Err(SpecError::at(join(field, "counters"), Why::Unused));
        }
        self.quota(field)
    }
}

/// An algorithm built from a file's limits: one limit for an algorithm,
/// two (all-or-nothing) for a pair.
pub trait FromSpec: Sized {
    /// Build it from `spec`, found at `field`.
    ///
    /// # Errors
    ///
    /// A [`SpecError`] naming the field at fault.
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError>;
}

/// The one limit of `spec`.
fn one<'a>(spec: &'a LimitsSpec, field: &str) -> Result<&'a LimitSpec, SpecError> {
    match spec.limits() {
        [one] => Ok(one),
        many => Err(SpecError::at(
            field,
            Why::Count {
                expected: 1,
                found: many.len(),
            },
        )),
    }
}

impl FromSpec for Gcra {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        Ok(Gcra::new(
            one(spec, field)?.expect(field, AlgorithmName::Gcra)?,
        ))
    }
}

impl FromSpec for TokenBucket {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        Ok(TokenBucket::new(
            one(spec, field)?.expect(field, AlgorithmName::TokenBucket)?,
        ))
    }
}

impl FromSpec for FixedWindow {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        Ok(FixedWindow::new(
            one(spec, field)?.expect(field, AlgorithmName::FixedWindow)?,
        ))
    }
}

impl FromSpec for SlidingLog {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        Ok(SlidingLog::new(
            one(spec, field)?.expect(field, AlgorithmName::SlidingLog)?,
        ))
    }
}

impl FromSpec for SlidingWindow {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        let limit = one(spec, field)?;
        let quota = limit.expect(field, AlgorithmName::SlidingWindow)?;
        SlidingWindow::try_new(quota, limit.counters.unwrap_or(2))
            .map_err(|e| SpecError::at(join(field, "counters"), Why::Config(e)))
    }
}

/// Two limits all-or-nothing: a list of two, in order.
impl<A: FromSpec, B: FromSpec> FromSpec for (A, B) {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        let [a, b] = spec.limits() else {
            return Err(SpecError::at(
                field,
                Why::Count {
                    expected: 2,
                    found: spec.limits().len(),
                },
            ));
        };
        Ok((
            A::try_from_spec(&LimitsSpec::One(a.clone()), &format!("{field}[0]"))?,
            B::try_from_spec(&LimitsSpec::One(b.clone()), &format!("{field}[1]"))?,
        ))
    }
}

impl TiersSpec {
    /// The tiers, in the order of their names, for a
    /// [`TieredLimiter`](crate::TieredLimiter) of `L`.
    ///
    /// ```
    /// use weir_rate::spec::TiersSpec;
    /// use weir_rate::{Gcra, TieredLimiter};
    ///
    /// let spec: TiersSpec = toml::from_str(r#"
    ///     default = "free"
    ///     tiers = { free = { algorithm = "gcra", limit = 0, per = "1s" } }
    /// "#).unwrap();
    /// let error = spec.tiers::<Gcra>().unwrap_err();
    /// assert_eq!(error.to_string(), "tiers.free.limit: a quota of zero units per window allows nothing");
    /// ```
    ///
    /// # Errors
    ///
    /// A [`SpecError`] naming the first field at fault.
    pub fn tiers<L: FromSpec>(&self) -> Result<Vec<Tier<L>>, SpecError> {
        self.tiers_at("")
    }

    /// [`tiers`](Self::tiers) of a spec found at `field` of a larger file,
    /// errors naming the field from the file's top.
    ///
    /// ```
    /// use weir_rate::spec::TiersSpec;
    /// use weir_rate::Gcra;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct File { limits: TiersSpec }
    ///
    /// let file: File = toml::from_str(r#"
    ///     [limits]
    ///     default = "free"
    ///     tiers = { free = { algorithm = "gcra", limit = 10, per = "0s" } }
    /// "#).unwrap();
    /// let error = file.limits.tiers_at::<Gcra>("limits").unwrap_err();
    /// assert_eq!(error.field(), "limits.tiers.free.per");
    /// ```
    ///
    /// # Errors
    ///
    /// As [`tiers`](Self::tiers).
    pub fn tiers_at<L: FromSpec>(&self, field: &str) -> Result<Vec<Tier<L>>, SpecError> {
        self.tiers
            .iter()
            .map(|(name, tier)| {
                let field = join(field, &format!("tiers.{name}"));
                Ok(match tier {
                    TierSpec::Unlimited(_) => Tier::unlimited(name),
                    TierSpec::Limits(limits) => {
                        Tier::limited(name, L::try_from_spec(limits, &field)?)
                    }
                })
            })
            .collect()
    }
}
