//! The report's charts as standalone SVG files: line charts (the Criteo
//! post's sliding-window comparisons, the rakelimit paper's received vs
//! forwarded packets, lateness distributions) and grouped bar charts with
//! min–max error bars (the timings behind the tables).
//!
//! Drawn with plotters' SVG backend; its `ab_glyph` feature measures text
//! with DejaVu Sans embedded in the binary (the `dejavu` crate), so
//! plotters' own layout (captions, series labels, axis areas) can be
//! trusted for fit without linking a font library (`ttf` would bring
//! font-kit, fontconfig and FreeType). The SVG names the family; the
//! viewer renders it.

mod draw;
#[cfg(test)]
mod tests;

use crate::harness::spread::Spread;

/// A chart the report saves as an SVG file, its title the image's alt text.
pub(crate) trait Chart {
    fn title(&self) -> &str;

    fn svg(&self) -> std::io::Result<String>;
}

/// One line of a [`LinePlot`]: legend text, points in x order, and whether
/// it is dashed (an approximation drawn over a reference).
#[derive(Debug, Clone)]
pub(crate) struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

impl Series {
    pub(crate) fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        let (name, dashed) = (name.into(), false);
        Self {
            name,
            points,
            dashed,
        }
    }

    pub(crate) fn dashed(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            dashed: true,
            ..Self::line(name, points)
        }
    }
}

/// Lines sharing axes; `references` are horizontal lines (a limit, an SLO)
/// named in the legend; `y_max` is the top of the vertical axis where the
/// data has a natural one (100 for percentages).
#[derive(Debug, Clone, Default)]
pub(crate) struct LinePlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub references: Vec<(f64, String)>,
    pub y_max: Option<f64>,
}

impl LinePlot {
    /// Lines over `x_label` and `y_label`, no reference, no fixed top.
    pub(crate) fn new(
        title: impl Into<String>,
        x_label: &str,
        y_label: &str,
        series: Vec<Series>,
    ) -> Self {
        let (title, x_label, y_label) = (title.into(), x_label.into(), y_label.into());
        Self {
            title,
            x_label,
            y_label,
            series,
            ..Self::default()
        }
    }
}

/// One bar: its height (a median where there is a spread) and the range
/// over the repetitions, drawn as an error bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bar(f64, Option<(f64, f64)>);

impl From<f64> for Bar {
    fn from(value: f64) -> Self {
        Self(value, None)
    }
}

impl From<Spread> for Bar {
    fn from(s: Spread) -> Self {
        Self(s.median, Some((s.min, s.max)))
    }
}

/// One series of a [`BarPlot`]: legend text and a bar per group, or a gap
/// where it has none.
#[derive(Debug, Clone)]
pub(crate) struct BarSeries(String, Vec<Option<Bar>>);

impl BarSeries {
    pub(crate) fn new<B: Into<Bar>>(
        name: impl Into<String>,
        bars: impl IntoIterator<Item = Option<B>>,
    ) -> Self {
        Self(
            name.into(),
            bars.into_iter().map(|b| b.map(Into::into)).collect(),
        )
    }
}

/// Grouped bars: along the horizontal axis one group per category, in each
/// group one bar per series, side by side. A logarithmic axis (`log_y`)
/// is for figures that span decades (what it cannot show is left out);
/// `values` prints each bar's value above it.
#[derive(Debug, Clone, Default)]
pub(crate) struct BarPlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<BarSeries>,
    pub references: Vec<(f64, String)>,
    pub log_y: bool,
    pub values: bool,
}

impl BarPlot {
    /// Bars of `series` in `groups`, on a linear axis, values printed.
    pub(crate) fn new(
        title: impl Into<String>,
        x_label: &str,
        y_label: &str,
        groups: Vec<String>,
        series: Vec<BarSeries>,
    ) -> Self {
        let (title, x_label, y_label) = (title.into(), x_label.into(), y_label.into());
        Self {
            title,
            x_label,
            y_label,
            groups,
            series,
            values: true,
            ..Self::default()
        }
    }
}
