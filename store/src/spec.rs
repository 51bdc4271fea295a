//! The store's settings as a configuration file gives them (feature
//! `serde`): a [`FailurePolicySpec`] by name, and the limits of a
//! [`LimitsSpec`] as the [`Limit`]s a builder or
//! [`StoreLimiter::set_limits`](crate::StoreLimiter::set_limits) takes.

use crate::backend::Backend;
use crate::builder::StoreLimiterBuilder;
use crate::failure::FailurePolicy;
use crate::limit::Limit;
use crate::limiter::StoreLimiter;
use serde::Deserialize;
use weir_rate::spec::{AlgorithmName, FromSpec, LimitsSpec, SpecError};
use weir_rate::{FixedWindow, Gcra, SlidingWindow, TokenBucket};

/// A [`FailurePolicy`] by its name in a file: `per_instance`, `open` or
/// `closed` (a policy of a limiter of the caller's own,
/// [`FailurePolicy::Local`], is built in code).
///
/// ```
/// use weir_store::{FailurePolicy, FailurePolicySpec};
///
/// #[derive(serde::Deserialize)]
/// struct File { on_failure: FailurePolicySpec }
/// let file: File = toml::from_str(r#"on_failure = "closed""#).unwrap();
/// assert!(matches!(FailurePolicy::from(file.on_failure), FailurePolicy::Closed));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicySpec {
    /// [`FailurePolicy::PerInstance`].
    #[default]
    PerInstance,
    /// [`FailurePolicy::Open`].
    Open,
    /// [`FailurePolicy::Closed`].
    Closed,
}

impl From<FailurePolicySpec> for FailurePolicy {
    fn from(spec: FailurePolicySpec) -> Self {
        match spec {
            FailurePolicySpec::PerInstance => Self::PerInstance,
            FailurePolicySpec::Open => Self::Open,
            FailurePolicySpec::Closed => Self::Closed,
        }
    }
}

impl Limit {
    /// The limits of `spec` (found at `field`), in order, as a store keeps
    /// them.
    ///
    /// ```
    /// use weir_rate::spec::LimitsSpec;
    /// use weir_store::Limit;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct File { limits: LimitsSpec }
    /// let file: File = toml::from_str(r#"limits = [
    ///     { algorithm = "gcra", limit = 10, per = "1s", burst = 20 },
    ///     { algorithm = "sliding_window", limit = 10000, per = "1d", counters = 24 },
    /// ]"#).unwrap();
    /// let limits = Limit::try_from_spec(&file.limits, "limits")?;
    /// assert_eq!(limits.len(), 2);
    /// # Ok::<(), weir_rate::spec::SpecError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`SpecError`] naming the first field at fault, and for an
    /// algorithm no store keeps (the sliding log).
    pub fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Vec<Limit>, SpecError> {
        let list = matches!(spec, LimitsSpec::AllOf(_));
        spec.limits()
            .iter()
            .enumerate()
            .map(|(i, one)| {
                let field = if list {
                    format!("{field}[{i}]")
                } else {
                    field.to_owned()
                };
                let one = LimitsSpec::One(one.clone());
                Ok(match one.limits()[0].algorithm {
                    AlgorithmName::Gcra => Limit::of(&Gcra::try_from_spec(&one, &field)?),
                    AlgorithmName::TokenBucket => Limit::of(&TokenBucket::try_from_spec(&one, &field)?),
                    AlgorithmName::FixedWindow => Limit::of(&FixedWindow::try_from_spec(&one, &field)?),
                    AlgorithmName::SlidingWindow => {
                        Limit::of(&SlidingWindow::try_from_spec(&one, &field)?)
                    }
                    found @ AlgorithmName::SlidingLog => {
                        return Err(SpecError::unexpected_algorithm(
                            format!("{field}.algorithm"),
                            found,
                            "an algorithm a store keeps (gcra, token_bucket, fixed_window, sliding_window)",
                        ));
                    }
                })
            })
            .collect()
    }
}

/// The limits of one store limiter as a file gives them: one limit, or
/// several decided all-or-nothing; never none. What a tier of a file's
/// [`TiersSpec`](weir_rate::spec::TiersSpec) reads into for a store
/// (`tiers_at::<StoreLimits>`), and what
/// [`StoreLimiter::builder_of`] builds a limiter of.
///
/// ```
/// use weir_rate::spec::TiersSpec;
/// use weir_store::StoreLimits;
///
/// let spec: TiersSpec = toml::from_str(r#"
///     default = "free"
///     [tiers]
///     free = [
///         { algorithm = "fixed_window", limit = 10, per = "1s" },
///         { algorithm = "sliding_window", limit = 10000, per = "1d", counters = 24 },
///     ]
///     internal = "unlimited"
/// "#).unwrap();
/// let tiers = spec.tiers::<StoreLimits>()?;
/// let free = tiers.iter().find(|t| t.name() == "free").unwrap().limit().unwrap();
/// assert_eq!(free.limits().len(), 2);
/// // Each tier's limiter, on Redis say:
/// // `RedisLimiter::builder_of(free).prefix("api").connect(target).await?`.
/// # Ok::<(), weir_rate::spec::SpecError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLimits(Vec<Limit>);

impl StoreLimits {
    /// The limits, in their order (for
    /// [`StoreLimiter::set_limits`](crate::StoreLimiter::set_limits)).
    pub fn limits(&self) -> &[Limit] {
        &self.0
    }
}

impl<B: Backend> StoreLimiter<B> {
    /// A builder of a limiter of `limits` (a tier of a file),
    /// all-or-nothing when there are several: as
    /// [`builder`](Self::builder) and [`and`](StoreLimiterBuilder::and)
    /// with each.
    pub fn builder_of(limits: &StoreLimits) -> StoreLimiterBuilder<B> {
        Self::builder_with(limits.0.clone())
    }
}

impl FromSpec for StoreLimits {
    fn try_from_spec(spec: &LimitsSpec, field: &str) -> Result<Self, SpecError> {
        if spec.limits().is_empty() {
            // An empty list is no limit: refused as a single algorithm
            // refuses it ("0 limits where 1 are needed").
            return Err(Gcra::try_from_spec(spec, field).expect_err("no limit to read"));
        }
        Ok(Self(Limit::try_from_spec(spec, field)?))
    }
}
