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

use crate::contest::Spread;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::{DashedPathElement, IntoDynElement};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::io;
use std::path::Path;

/// A chart the report can save as an SVG file.
pub trait Chart {
    /// The chart's title, also the image's alt text in the report.
    fn title(&self) -> &str;

    /// The chart as an SVG document.
    fn svg(&self) -> io::Result<String>;

    /// Write the chart to `path`.
    fn save(&self, path: &Path) -> io::Result<()> {
        let svg = self.svg()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, svg)
    }
}

/// One line of a [`LinePlot`]: its legend text, its points in x order, and
/// whether it is dashed (an approximation drawn over a reference).
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points in data coordinates, in x order.
    pub points: Vec<(f64, f64)>,
    /// Dashed line.
    pub dashed: bool,
}

impl Series {
    /// A solid line.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        let name = name.into();
        Self {
            name,
            points,
            dashed: false,
        }
    }

    /// A dashed line.
    pub fn dashed(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            dashed: true,
            ..Self::line(name, points)
        }
    }
}

/// A chart of one or more lines sharing axes.
#[derive(Debug, Clone, Default)]
pub struct LinePlot {
    /// Title above the chart.
    pub title: String,
    /// Label of the horizontal axis.
    pub x_label: String,
    /// Label of the vertical axis.
    pub y_label: String,
    /// The lines, drawn in order (the first underneath).
    pub series: Vec<Series>,
    /// Horizontal reference lines (a limit, an SLO) and their legend text.
    pub references: Vec<(f64, String)>,
    /// The top of the vertical axis where the data has a natural one (100
    /// for percentages); otherwise a little above the data.
    pub y_max: Option<f64>,
}

/// One bar: its height and, where the figure varied over repetitions, the
/// range drawn as an error bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// The bar's height (a median where there is a spread).
    pub value: f64,
    /// Lowest and highest value over the repetitions.
    pub whisker: Option<(f64, f64)>,
}

impl From<f64> for Bar {
    fn from(value: f64) -> Self {
        Self {
            value,
            whisker: None,
        }
    }
}

impl From<Spread> for Bar {
    fn from(s: Spread) -> Self {
        Self {
            value: s.median,
            whisker: Some((s.min, s.max)),
        }
    }
}

/// One series of a [`BarPlot`]: a bar per group, or a gap where it has none.
#[derive(Debug, Clone)]
pub struct BarSeries {
    /// Legend text.
    pub name: String,
    /// One entry per group of the plot, in the plot's group order.
    pub bars: Vec<Option<Bar>>,
}

impl BarSeries {
    /// A series from one value (or spread) per group; `None` leaves a gap.
    pub fn new<B: Into<Bar>>(
        name: impl Into<String>,
        bars: impl IntoIterator<Item = Option<B>>,
    ) -> Self {
        let bars = bars.into_iter().map(|b| b.map(Into::into)).collect();
        Self {
            name: name.into(),
            bars,
        }
    }
}

/// Grouped bars: along the horizontal axis one group per category, in each
/// group one bar per series, side by side in series order.
#[derive(Debug, Clone, Default)]
pub struct BarPlot {
    /// Title above the chart.
    pub title: String,
    /// Label of the horizontal axis (what the groups are).
    pub x_label: String,
    /// Label of the vertical axis.
    pub y_label: String,
    /// The groups' names, left to right.
    pub groups: Vec<String>,
    /// The series, each with one entry per group.
    pub series: Vec<BarSeries>,
    /// Horizontal reference lines and their legend text.
    pub references: Vec<(f64, String)>,
    /// A logarithmic vertical axis, for figures that span decades (bars
    /// and error-bar ends at or below zero are then left out).
    pub log_y: bool,
    /// Print each bar's value above it.
    pub values: bool,
}

/// Series colours; the first, grey, is for the reference the others are
/// drawn against (an exact count, the packets sent).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x8c, 0x8c, 0x8c),
    RGBColor(0xe8, 0x71, 0x0a),
    RGBColor(0x1a, 0x73, 0xe8),
    RGBColor(0x18, 0x80, 0x38),
    RGBColor(0xa1, 0x42, 0xf4),
    RGBColor(0xd9, 0x30, 0x25),
    RGBColor(0x00, 0x89, 0x7b),
    RGBColor(0x79, 0x55, 0x48),
];
/// Reference lines' colours.
const REFERENCES: [RGBColor; 3] = [
    RGBColor(0xd9, 0x30, 0x25),
    RGBColor(0x20, 0x21, 0x24),
    RGBColor(0xa1, 0x42, 0xf4),
];
const FONT: &str = "sans-serif";
const WIDTH: u32 = 800;
/// Plot area and axes, between the title and the legend.
const CHART_HEIGHT: u32 = 360;

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Bars have no reference series, so grey comes last.
fn bar_colour(i: usize) -> RGBColor {
    colour(i + 1)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Registers the embedded font under the family every text names.
fn font(size: u32) -> FontDesc<'static> {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // DejaVu Sans is a valid font; registering it cannot fail.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
    (FONT, size).into_font()
}

fn width_of(text: &str, size: u32) -> u32 {
    font(size).box_size(text).map_or(0, |(w, _)| w)
}

/// `text` broken at spaces into lines at most `width` pixels wide in
/// `size` (a longer word keeps a line to itself).
fn wrap(text: &str, width: u32, size: u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if width_of(&format!("{line} {word}"), size) <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    Line,
    Dashed,
    Box,
}

type Legend = Vec<(String, RGBColor, Swatch)>;

fn references(refs: &[(f64, String)]) -> impl Iterator<Item = (String, RGBColor, Swatch)> + '_ {
    let colours = REFERENCES.iter().cycle();
    refs.iter()
        .zip(colours)
        .map(|((_, label), c)| (label.clone(), *c, Swatch::Dashed))
}

/// A canvas of the wrapped title, `middle` pixels that `draw` fills, and
/// the legend in as many columns as its longest entry allows, laid out by
/// plotters' series labels.
fn render(
    title: &str,
    legend: &Legend,
    middle: u32,
    draw: impl FnOnce(&Area<'_>) -> Drawn,
) -> io::Result<String> {
    let title = wrap(title, WIDTH - 40, 16);
    let line = font(16)
        .box_size("Ag")
        .map_or(16, |(_, h)| h + 2 * (h / 2).min(5));
    let longest = legend
        .iter()
        .map(|(name, _, _)| width_of(name, 12))
        .max()
        .unwrap_or(0);
    let columns = ((WIDTH - 20) / (longest + 60)).clamp(1, legend.len().max(1) as u32) as usize;
    let rows = legend.len().div_ceil(columns);
    let legend_height = if legend.is_empty() {
        0
    } else {
        rows as u32 * 15 + 16
    };
    let height = 8 + line * title.len() as u32 + middle + legend_height;
    let mut svg = String::new();
    let drawn = (|| -> Drawn {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut area = root.margin(8, 0, 0, 0);
        for text in &title {
            area = area.titled(text, font(16))?;
        }
        let (chart, bottom) = area.split_vertically(middle);
        draw(&chart)?;
        for (column, entries) in bottom
            .margin(0, 0, 10, 10)
            .split_evenly((1, columns))
            .iter()
            .zip(legend.chunks(rows.max(1)))
        {
            let mut key = ChartBuilder::on(column).build_cartesian_2d(0..1, 0..1)?;
            for (name, colour, swatch) in entries {
                let (colour, swatch) = (*colour, *swatch);
                key.draw_series(std::iter::empty::<Circle<(i32, i32), i32>>())?
                    .label(name)
                    .legend(move |(x, y)| {
                        let stroke = colour.stroke_width(2);
                        match swatch {
                            Swatch::Line => {
                                PathElement::new(vec![(x, y), (x + 24, y)], stroke).into_dyn()
                            }
                            Swatch::Dashed => {
                                DashedPathElement::new(vec![(x, y), (x + 24, y)], 6, 4, stroke)
                                    .into_dyn()
                            }
                            Swatch::Box => {
                                Rectangle::new([(x, y - 5), (x + 22, y + 5)], colour.filled())
                                    .into_dyn()
                            }
                        }
                    });
            }
            key.configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(font(12))
                .margin(2)
                .draw()?;
        }
        root.present()?;
        Ok(())
    })();
    drawn.map_err(|e| io::Error::other(e.to_string()))?;
    Ok(svg)
}

/// The mesh every chart shares: a light grid, the axes' titles, short y labels.
fn mesh<Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, Y>>,
    x_label: &str,
    y_label: &str,
    tweak: impl FnOnce(&mut plotters::chart::MeshStyle<'_, '_, RangedCoordf64, Y, SVGBackend<'_>>),
) -> Drawn {
    let mut mesh = chart.configure_mesh();
    mesh.max_light_lines(0)
        .bold_line_style(RGBColor(0xe0, 0xe0, 0xe0))
        .y_label_formatter(&|v| short(*v))
        .label_style(font(12))
        .axis_desc_style(font(13))
        .x_desc(x_label)
        .y_desc(y_label);
    tweak(&mut mesh);
    mesh.draw()?;
    Ok(())
}

/// A dashed horizontal line across `xs` at each reference.
fn draw_references<X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    xs: (f64, f64),
    refs: &[(f64, String)],
) -> Drawn {
    for ((y, _), colour) in refs.iter().zip(REFERENCES.iter().cycle()) {
        let line = [(xs.0, *y), (xs.1, *y)];
        chart.draw_series(DashedLineSeries::new(line, 3, 3, colour.stroke_width(2)))?;
    }
    Ok(())
}

impl Chart for LinePlot {
    fn title(&self) -> &str {
        &self.title
    }

    fn svg(&self) -> io::Result<String> {
        let swatch = |dashed| if dashed { Swatch::Dashed } else { Swatch::Line };
        let legend = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), colour(i), swatch(s.dashed)));
        let legend: Legend = legend.chain(references(&self.references)).collect();
        let finite = |(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
        let points = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(finite)
        };
        let (x0, x1) = points().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
        let (x0, x1) = if x0 < x1 {
            (
                if x0 > 0.0 && x0 < (x1 - x0) * 0.05 {
                    0.0
                } else {
                    x0
                },
                x1,
            )
        } else {
            (0.0, 1.0)
        };
        let refs = self.references.iter().map(|r| r.0);
        let (y0, y1) = points()
            .map(|p| p.1)
            .chain(refs)
            .fold((0.0f64, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
        let y1 = self.y_max.unwrap_or(if y1 > 0.0 { y1 * 1.08 } else { 1.0 });
        render(&self.title, &legend, CHART_HEIGHT, |area| {
            let mut chart = ChartBuilder::on(area)
                .margin(16)
                .margin_top(8)
                .x_label_area_size(44)
                .y_label_area_size(56)
                .build_cartesian_2d(x0..x1, y0 * 1.08..y1)?;
            mesh(&mut chart, &self.x_label, &self.y_label, |m| {
                m.x_labels(8).y_labels(6).x_label_formatter(&|v| short(*v));
            })?;
            draw_references(&mut chart, (x0, x1), &self.references)?;
            for (i, series) in self.series.iter().enumerate() {
                let points: Vec<(f64, f64)> =
                    series.points.iter().filter(finite).copied().collect();
                let style = colour(i).stroke_width(2);
                if series.dashed {
                    chart.draw_series(DashedLineSeries::new(points, 6, 4, style))?;
                } else {
                    chart.draw_series(LineSeries::new(points, style))?;
                }
            }
            Ok(())
        })
    }
}

impl BarPlot {
    /// Bar heights, error-bar ends and references: what the axis must show.
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let bars = self.series.iter().flat_map(|s| s.bars.iter().flatten());
        let bars = bars.flat_map(|b| {
            let (lo, hi) = b.whisker.unwrap_or((b.value, b.value));
            [b.value, lo, hi]
        });
        bars.chain(self.references.iter().map(|r| r.0))
            .filter(|v| v.is_finite())
    }

    fn draw_on<Y>(&self, area: &Area<'_>, y: Y, labels: &[Vec<String>]) -> Drawn
    where
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let bottom = y.range().start;
        let n = self.groups.len().max(1);
        let lines = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;
        let mut chart = ChartBuilder::on(area)
            .margin(16)
            .margin_top(8)
            .x_label_area_size(34 + 15 * lines)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..n as f64, y)?;
        mesh(&mut chart, &self.x_label, &self.y_label, |m| {
            m.disable_x_mesh().x_labels(0).y_labels(8);
        })?;
        let style = font(12)
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top));
        let names = labels
            .iter()
            .enumerate()
            .flat_map(|(g, label)| label.iter().enumerate().map(move |(i, line)| (g, i, line)));
        chart.draw_series(names.map(|(g, i, line)| {
            EmptyElement::at((g as f64 + 0.5, bottom))
                + Text::new(line.clone(), (0, 6 + 15 * i as i32), style.clone())
        }))?;
        let drawable = |v: f64| v.is_finite() && (!self.log_y || v > 0.0);
        let slot = 0.76 / self.series.len().max(1) as f64;
        for (i, series) in self.series.iter().enumerate() {
            let bars = series
                .bars
                .iter()
                .take(n)
                .enumerate()
                .filter_map(|(g, b)| Some((g, b.filter(|b| drawable(b.value))?)));
            for (g, bar) in bars {
                let x0 = g as f64 + 0.12 + i as f64 * slot;
                let mid = x0 + slot * 0.43;
                let base = if self.log_y { bottom } else { 0.0 };
                chart.draw_series([Rectangle::new(
                    [(x0, base), (x0 + slot * 0.86, bar.value)],
                    bar_colour(i).filled(),
                )])?;
                let mut top = bar.value;
                if let Some((lo, hi)) = bar.whisker.filter(|w| drawable(w.0) && drawable(w.1)) {
                    chart.draw_series([ErrorBar::new_vertical(
                        mid,
                        lo,
                        bar.value,
                        hi,
                        BLACK.stroke_width(1),
                        8,
                    )])?;
                    top = top.max(hi);
                }
                if self.values {
                    let style = font(10)
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom));
                    chart
                        .draw_series([EmptyElement::at((mid, top))
                            + Text::new(short(bar.value), (0, -3), style)])?;
                }
            }
        }
        draw_references(&mut chart, (0.0, n as f64), &self.references)
    }
}

impl Chart for BarPlot {
    fn title(&self) -> &str {
        &self.title
    }

    fn svg(&self) -> io::Result<String> {
        let legend = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), bar_colour(i), Swatch::Box));
        let legend: Legend = legend.chain(references(&self.references)).collect();
        // Group names wrap to their group's width rather than run into
        // their neighbours: plotters' axis labels are single lines.
        let group_px = (WIDTH - 96) / self.groups.len().max(1) as u32;
        let labels: Vec<Vec<String>> = self
            .groups
            .iter()
            .map(|g| wrap(g, group_px - 8, 12))
            .collect();
        let lines = labels.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
        let headroom = if self.values { 1.12 } else { 1.05 };
        render(
            &self.title,
            &legend,
            CHART_HEIGHT + 15 * (lines - 1),
            |area| {
                if self.log_y {
                    let positive = || self.values().filter(|v| *v > 0.0);
                    let lo = positive().fold(f64::INFINITY, f64::min);
                    let (lo, hi) = if lo.is_finite() {
                        let lo = 10f64.powf(lo.log10().floor());
                        (lo, (positive().fold(0.0, f64::max) * 1.6).max(lo * 10.0))
                    } else {
                        (1.0, 10.0)
                    };
                    let y: LogCoord<f64> = (lo..hi).log_scale().into();
                    self.draw_on(area, y, &labels)
                } else {
                    let (lo, hi) = self
                        .values()
                        .fold((0.0f64, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
                    let hi = if hi > 0.0 { hi * headroom } else { 1.0 };
                    let y: RangedCoordf64 = (lo * headroom..hi).into();
                    self.draw_on(area, y, &labels)
                }
            },
        )
    }
}

/// A number for a label: 1.2M, 35k, 120, 1.50, 2.0e-3.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of every `<text>` element.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split('>')
            .filter_map(|t| t.split_once("</text").map(|t| t.0.trim()))
            .collect()
    }

    /// Filled rectangles in series `i`'s bar colour (bars and the legend's swatch).
    fn bars_of(svg: &str, i: usize) -> usize {
        let c = bar_colour(i);
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        svg.lines()
            .filter(|l| l.starts_with("<rect") && l.contains(&fill))
            .count()
    }

    fn bar_plot(log_y: bool) -> BarPlot {
        BarPlot {
            title: "ns per event by counter and thread count".into(),
            x_label: "threads".into(),
            y_label: "ns/event".into(),
            groups: vec!["1 thread".into(), "2 threads".into(), "8 threads".into()],
            series: vec![
                BarSeries::new(
                    "weir <rows>",
                    [8.0, 20.0, 79.0].map(|m| Some(Spread::of(&[m, m + 1.0, m + 2.0]))),
                ),
                BarSeries::new("naive Mutex", [Some(138.0), None, Some(2296.0)]),
            ],
            references: vec![(100.0, "budget".into())],
            log_y,
            values: true,
        }
    }

    #[test]
    fn line_plot_escapes_and_names_its_series_and_reference() {
        let plot = LinePlot {
            title: "a < b & c".into(),
            x_label: "time (s)".into(),
            y_label: "calls".into(),
            series: vec![
                Series::line(
                    "exact",
                    vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 1.5)],
                ),
                Series::dashed("estimate", vec![(0.0, 2.0), (1.0, 1.0), (2.0, 3.0)]),
            ],
            references: vec![(2.5, "limit 2.5".into())],
            y_max: None,
        };
        let svg = plot.svg().expect("renders");
        let names = [
            "a &lt; b &amp; c",
            "exact",
            "estimate",
            "limit 2.5",
            "time (s)",
            "calls",
        ];
        for text in names {
            assert!(texts(&svg).contains(&text), "{text} missing");
        }
        assert!(!svg.contains("NaN"));
        // The solid line is one polyline of its three drawable points.
        let solid = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("#8C8C8C"));
        assert_eq!(solid.map(|l| l.matches(',').count()).max(), Some(3));
    }

    #[test]
    fn bar_plot_draws_a_bar_and_error_bar_per_value() {
        for log_y in [false, true] {
            let svg = bar_plot(log_y).svg().expect("renders");
            for text in [
                "weir &lt;rows&gt;",
                "naive Mutex",
                "8 threads",
                "budget",
                "2296",
            ] {
                assert!(
                    texts(&svg).contains(&text),
                    "{text} missing (log_y {log_y})"
                );
            }
            // One bar per value plus the legend's swatch; the gap stays empty.
            assert_eq!(
                (bars_of(&svg, 0), bars_of(&svg, 1)),
                (3 + 1, 2 + 1),
                "log_y {log_y}"
            );
            // Three error bars of three strokes each.
            let strokes = svg
                .lines()
                .filter(|l| l.starts_with("<line") && l.contains("stroke=\"#000000\""));
            assert!(strokes.count() >= 9);
        }
    }

    #[test]
    fn log_bars_leave_out_what_a_log_axis_cannot_show() {
        let plot = BarPlot {
            groups: vec!["a".into(), "b".into()],
            series: vec![BarSeries::new("s", [Some(-1.0), Some(10.0)])],
            log_y: true,
            ..BarPlot::default()
        };
        assert_eq!(bars_of(&plot.svg().expect("renders"), 0), 1 + 1);
        let linear = BarPlot {
            log_y: false,
            ..plot
        };
        assert_eq!(bars_of(&linear.svg().expect("renders"), 0), 2 + 1);
    }

    #[test]
    fn empty_plots_render_and_long_texts_wrap() {
        assert!(LinePlot::default().svg().is_ok() && BarPlot::default().svg().is_ok());
        let plot = BarPlot {
            title: "word ".repeat(40),
            groups: vec![
                "a rather long configuration name, two threads sharing one classifier"
                    .into();
                6
            ],
            series: vec![BarSeries::new("s", vec![Some(1.0); 6])],
            ..BarPlot::default()
        };
        let svg = plot.svg().expect("renders");
        let texts = texts(&svg);
        assert!(
            texts.iter().all(|t| width_of(t, 16) <= WIDTH - 40),
            "{texts:?}"
        );
        assert!(texts.iter().filter(|t| t.starts_with("word")).count() >= 2);
        assert_eq!(texts.iter().filter(|t| t.contains("classifier")).count(), 6);
        assert_eq!(
            wrap("one two three", width_of("one two", 12), 12),
            ["one two", "three"]
        );
    }
}
