//! [`Spread`]: how one figure varied over repetitions, and quantiles.

/// The spread of one figure over repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The smallest value.
    pub min: f64,
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (NaNs sort last).
    ///
    /// # Panics
    ///
    /// If `values` is empty.
    pub fn of(values: &[f64]) -> Self {
        assert!(!values.is_empty(), "a spread needs at least one value");
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0;
        Self {
            min: sorted[0],
            median,
            max: sorted[n - 1],
        }
    }

    /// `min / median / max`, each written by `f`.
    pub fn show_each(&self, f: impl Fn(f64) -> String) -> String {
        format!("{} / {} / {}", f(self.min), f(self.median), f(self.max))
    }

    /// `median (min–max)` with `d` digits after the point.
    pub fn show(&self, d: usize) -> String {
        format!("{:.d$} ({:.d$}–{:.d$})", self.median, self.min, self.max)
    }
}

/// The `q`-quantile of `sorted`, by nearest rank; `None` if it is empty.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let rank = (sorted.len().max(1) - 1) as f64 * q;
    sorted.get(rank.round() as usize).copied()
}
