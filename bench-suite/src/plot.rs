//! The report's charts as standalone SVG files: line charts (the Criteo
//! post's sliding-window comparisons, the rakelimit paper's received vs
//! forwarded packets, lateness distributions) and grouped bar charts with
//! min–max whiskers (the timings behind the tables).
//!
//! Drawn with plotters' SVG backend, built without its font features: `ttf`
//! would bring font-kit, which links fontconfig and FreeType, and a fresh
//! machine should need no font or graphics library to build or run the
//! report. The SVG backend writes text as `<text>` elements for the viewer
//! to render, so labels need no font here; plotters then only guesses how
//! wide a text is. That guess cannot be trusted for fit, so what must not
//! overflow (the title, the bar groups' names, the legend) is wrapped and
//! placed here with room to spare instead of by plotters' own layout.

use crate::report::Spread;
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use std::io;
use std::ops::Range;
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

/// One line of a [`LinePlot`].
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points in data coordinates, in x order.
    pub points: Vec<(f64, f64)>,
    /// Dashed line (for the approximations drawn over a reference).
    pub dashed: bool,
}

impl Series {
    /// A solid line.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
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
    /// Optional horizontal reference line (e.g. a limit) and its label.
    pub reference: Option<(f64, String)>,
    /// The top of the vertical axis where the data has a natural one (100
    /// for percentages); otherwise a round number above the data.
    pub y_max: Option<f64>,
}

/// One bar: its height and, where the figure varied over repetitions, the
/// range drawn as a whisker.
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
        Self {
            name: name.into(),
            bars: bars.into_iter().map(|b| b.map(Into::into)).collect(),
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
    /// Horizontal reference lines and their labels.
    pub references: Vec<(f64, String)>,
    /// A logarithmic vertical axis, for figures that span decades (bars
    /// and whisker ends at or below zero are then left out).
    pub log_y: bool,
    /// Print each bar's value above it.
    pub values: bool,
}

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
/// Reference lines' colours, for telling apart more than one in a legend.
const REFERENCES: [RGBColor; 3] = [
    RGBColor(0xd9, 0x30, 0x25),
    RGBColor(0x20, 0x21, 0x24),
    RGBColor(0xa1, 0x42, 0xf4),
];
const GRID: RGBColor = RGBColor(0xe0, 0xe0, 0xe0);
const FONT: &str = "sans-serif";
const WIDTH: u32 = 800;
/// The part between title and legend: plot area and axes.
const CHART_HEIGHT: u32 = 360;
const LEFT_AREA: u32 = 64;
const MARGIN: u32 = 16;
const LINE_HEIGHT: u32 = 15;
/// Characters of a title line at its font size: generous, because a line
/// that runs off the canvas is lost while a short one costs nothing.
const TITLE_CHARS: usize = 82;
/// Average advance of a 12-pixel sans-serif character, for wrapping.
const CHAR_PX: f64 = 6.8;

/// A line's colour: the first is grey, for the reference the others are
/// drawn against (an exact count, the packets sent).
fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// A bar's colour: bars have no reference series, so grey comes last.
fn bar_colour(i: usize) -> RGBColor {
    colour(i + 1)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The grid, fonts, axis titles and y labels every chart shares.
fn house_mesh<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
    x_label: &str,
    y_label: &str,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged<ValueType = f64>,
    DB: DrawingBackend,
{
    mesh.max_light_lines(0)
        .bold_line_style(GRID)
        .y_label_formatter(&short_label)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .x_desc(x_label)
        .y_desc(y_label)
}

/// [`short`] as a label formatter.
fn short_label(v: &f64) -> String {
    short(*v)
}
type Drawn = Result<(), Box<dyn Error>>;

fn text_style(size: u32, pos: Pos) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK).pos(pos)
}

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    Line,
    Dashed,
    Box,
}

struct Legend {
    entries: Vec<(String, RGBColor, Swatch)>,
    columns: usize,
}

impl Legend {
    /// As many equal columns as the longest entry allows.
    fn new(entries: Vec<(String, RGBColor, Swatch)>) -> Self {
        let longest = entries
            .iter()
            .map(|(name, _, _)| name.chars().count())
            .max()
            .unwrap_or(0);
        let entry_px = 36.0 + longest as f64 * CHAR_PX;
        let fit = (f64::from(WIDTH - 2 * MARGIN) / entry_px).floor() as usize;
        let columns = fit.clamp(1, entries.len().max(1));
        Self { entries, columns }
    }

    fn rows(&self) -> u32 {
        self.entries.len().div_ceil(self.columns) as u32
    }

    fn height(&self) -> u32 {
        if self.entries.is_empty() {
            0
        } else {
            self.rows() * 18 + 10
        }
    }

    fn draw(&self, area: &Area<'_>) -> Drawn {
        let column_px = ((WIDTH - 2 * MARGIN) as usize / self.columns) as i32;
        for (i, (name, colour, swatch)) in self.entries.iter().enumerate() {
            let x = MARGIN as i32 + (i % self.columns) as i32 * column_px;
            let y = 4 + (i / self.columns) as i32 * 18 + 8;
            match swatch {
                Swatch::Box => {
                    area.draw(&Rectangle::new(
                        [(x, y - 5), (x + 22, y + 5)],
                        colour.filled(),
                    ))?;
                }
                Swatch::Line => {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 24, y)],
                        colour.stroke_width(2),
                    ))?;
                }
                Swatch::Dashed => {
                    area.draw(&DashedPathElement::new(
                        vec![(x, y), (x + 24, y)],
                        6,
                        4,
                        colour.stroke_width(2),
                    ))?;
                }
            }
            area.draw(&Text::new(
                name.clone(),
                (x + 30, y),
                text_style(12, Pos::new(HPos::Left, VPos::Center)),
            ))?;
        }
        Ok(())
    }
}

/// A canvas with the wrapped title on top and the legend at the bottom;
/// `draw` fills the `middle` pixels between them.
fn render(
    title: &str,
    legend: &Legend,
    middle: u32,
    draw: impl FnOnce(&Area<'_>) -> Drawn,
) -> io::Result<String> {
    let title_lines = wrap(title, TITLE_CHARS);
    let title_height = 10 + 20 * title_lines.len() as u32;
    let height = title_height + middle + legend.height();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let drawn = (|| -> Drawn {
            root.fill(&WHITE)?;
            let (top, rest) = root.split_vertically(title_height);
            for (i, line) in title_lines.iter().enumerate() {
                top.draw(&Text::new(
                    line.clone(),
                    ((WIDTH / 2) as i32, 8 + 20 * i as i32),
                    text_style(16, Pos::new(HPos::Center, VPos::Top)),
                ))?;
            }
            let (chart, bottom) = rest.split_vertically(middle);
            draw(&chart)?;
            legend.draw(&bottom)?;
            root.present()?;
            Ok(())
        })();
        drawn.map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(svg)
}

impl LinePlot {
    /// The axes' ranges: x over the data (from zero when it starts just
    /// after it), y from zero (or below, for negative data) to a round
    /// number above the data and the reference.
    fn bounds(&self) -> (Range<f64>, Range<f64>) {
        let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut y0, mut y1) = (0.0f64, f64::NEG_INFINITY);
        for &(x, y) in self.points() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if let Some((y, _)) = &self.reference {
            y1 = y1.max(*y);
        }
        if !x0.is_finite() || !x1.is_finite() || x1 <= x0 {
            (x0, x1) = (0.0, 1.0);
        }
        // Time axes that start just after zero read better from zero.
        if x0 > 0.0 && x0 < (x1 - x0) * 0.05 {
            x0 = 0.0;
        }
        if x0 == 0.0 {
            x1 = nice_ceiling(x1);
        }
        let y1 = match self.y_max {
            Some(top) if top > 0.0 => top,
            _ if y1.is_finite() && y1 > 0.0 => nice_ceiling(y1 * 1.05),
            _ => 1.0,
        };
        let y0 = if y0 < 0.0 {
            -nice_ceiling(-y0 * 1.05)
        } else {
            0.0
        };
        (x0..x1, y0..y1)
    }

    /// Every point that can be drawn.
    fn points(&self) -> impl Iterator<Item = &(f64, f64)> {
        self.series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    }
}

impl Chart for LinePlot {
    fn title(&self) -> &str {
        &self.title
    }

    fn svg(&self) -> io::Result<String> {
        let legend = Legend::new(
            self.series
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let swatch = if s.dashed {
                        Swatch::Dashed
                    } else {
                        Swatch::Line
                    };
                    (s.name.clone(), colour(i), swatch)
                })
                .collect(),
        );
        let (xs, ys) = self.bounds();
        render(&self.title, &legend, CHART_HEIGHT, |area| {
            let mut chart = ChartBuilder::on(area)
                .margin_left(MARGIN)
                .margin_right(MARGIN + 8)
                .margin_top(8)
                .x_label_area_size(48)
                .y_label_area_size(LEFT_AREA)
                .build_cartesian_2d(xs.clone(), ys.clone())?;
            house_mesh(&mut chart.configure_mesh(), &self.x_label, &self.y_label)
                .x_labels(6)
                .y_labels(6)
                .x_label_formatter(&short_label)
                .draw()?;
            if let Some((y, label)) = &self.reference {
                draw_reference(&mut chart, (xs.start, xs.end), *y, REFERENCES[0])?;
                chart.draw_series(std::iter::once(
                    EmptyElement::at((xs.end, *y))
                        + Text::new(
                            label.clone(),
                            (-4, -3),
                            (FONT, 12)
                                .into_font()
                                .color(&REFERENCES[0])
                                .pos(Pos::new(HPos::Right, VPos::Bottom)),
                        ),
                ))?;
            }
            for (i, series) in self.series.iter().enumerate() {
                let points: Vec<(f64, f64)> = series
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect();
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

/// The horizontal axis of a bar chart: group `g` spans `g..g + 1`. Its
/// names are drawn by the chart (wrapped), so it has no key points.
#[derive(Debug, Clone, Copy)]
struct Groups(usize);

impl Ranged for Groups {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (value / self.0.max(1) as f64 * span).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        Vec::new()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0.max(1) as f64
    }
}

/// Share of a group's width left empty on each side of its bars.
const GROUP_PAD: f64 = 0.12;

impl BarPlot {
    /// Every drawable value: bar heights and whisker ends.
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.bars.iter().flatten())
            .flat_map(|b| {
                let (lo, hi) = b.whisker.unwrap_or((b.value, b.value));
                [b.value, lo, hi]
            })
            .filter(|v| v.is_finite())
    }

    /// A log axis from the decade below the smallest positive value to a
    /// round number above the largest (with room for the value labels).
    fn log_bounds(&self) -> Range<f64> {
        let positive = || {
            self.values()
                .chain(self.references.iter().map(|r| r.0))
                .filter(|v| *v > 0.0)
        };
        let lo = positive().fold(f64::INFINITY, f64::min);
        let hi = positive().fold(0.0, f64::max);
        if !lo.is_finite() {
            return 1.0..10.0;
        }
        let lo = 10f64.powf(lo.log10().floor());
        let hi = nice_ceiling(hi * 1.6).max(lo * 10.0);
        lo..hi
    }

    fn linear_bounds(&self) -> Range<f64> {
        let all = || self.values().chain(self.references.iter().map(|r| r.0));
        let lo = all().fold(0.0, f64::min);
        let hi = all().fold(0.0, f64::max);
        let headroom = if self.values { 1.12 } else { 1.05 };
        let hi = if hi > 0.0 {
            nice_ceiling(hi * headroom)
        } else {
            1.0
        };
        let lo = if lo < 0.0 {
            -nice_ceiling(-lo * headroom)
        } else {
            0.0
        };
        lo..hi
    }

    /// The groups' names, each wrapped to its group's width.
    fn group_labels(&self) -> Vec<Vec<String>> {
        let plot_px = f64::from(WIDTH - LEFT_AREA - 2 * MARGIN - 8);
        let group_px = plot_px / self.groups.len().max(1) as f64;
        let chars = ((group_px - 6.0) / CHAR_PX).floor().max(6.0) as usize;
        self.groups.iter().map(|g| wrap(g, chars)).collect()
    }

    fn draw_on<Y>(&self, area: &Area<'_>, y: Y, labels: &[Vec<String>]) -> Drawn
    where
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let lines = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;
        let bottom = y.range().start;
        let n = self.groups.len().max(1);
        let mut chart = ChartBuilder::on(area)
            .margin_left(MARGIN)
            .margin_right(MARGIN + 8)
            .margin_top(8)
            .x_label_area_size(14 + LINE_HEIGHT * lines + 20)
            .y_label_area_size(LEFT_AREA)
            .build_cartesian_2d(Groups(n), y)?;
        house_mesh(&mut chart.configure_mesh(), &self.x_label, &self.y_label)
            .disable_x_mesh()
            .y_labels(8)
            .draw()?;
        for (g, label) in labels.iter().enumerate() {
            for (i, line) in label.iter().enumerate() {
                chart.draw_series(std::iter::once(
                    EmptyElement::at((g as f64 + 0.5, bottom))
                        + Text::new(
                            line.clone(),
                            (0, 6 + (LINE_HEIGHT as usize * i) as i32),
                            text_style(12, Pos::new(HPos::Center, VPos::Top)),
                        ),
                ))?;
            }
        }
        let drawable = |v: f64| v.is_finite() && (!self.log_y || v > 0.0);
        let slot = (1.0 - 2.0 * GROUP_PAD) / self.series.len().max(1) as f64;
        for (i, series) in self.series.iter().enumerate() {
            let style = bar_colour(i).filled();
            for (g, bar) in series.bars.iter().enumerate().take(n) {
                let Some(bar) = bar.filter(|b| drawable(b.value)) else {
                    continue;
                };
                let x0 = g as f64 + GROUP_PAD + i as f64 * slot;
                let x1 = x0 + slot * 0.86;
                let mid = (x0 + x1) / 2.0;
                let base = if self.log_y { bottom } else { 0.0 };
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x0, base), (x1, bar.value)],
                    style,
                )))?;
                let mut top = bar.value;
                if let Some((lo, hi)) = bar.whisker.filter(|w| drawable(w.0) && drawable(w.1)) {
                    let cap = slot * 0.2;
                    let whisker = BLACK.stroke_width(1);
                    chart.draw_series([
                        PathElement::new(vec![(mid, lo), (mid, hi)], whisker),
                        PathElement::new(vec![(mid - cap, lo), (mid + cap, lo)], whisker),
                        PathElement::new(vec![(mid - cap, hi), (mid + cap, hi)], whisker),
                    ])?;
                    top = top.max(hi);
                }
                if self.values {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((mid, top))
                            + Text::new(
                                short(bar.value),
                                (0, -3),
                                text_style(10, Pos::new(HPos::Center, VPos::Bottom)),
                            ),
                    ))?;
                }
            }
        }
        for (k, (y, _)) in self.references.iter().enumerate() {
            if drawable(*y) {
                draw_reference(&mut chart, (0.0, n as f64), *y, reference_colour(k))?;
            }
        }
        Ok(())
    }
}

impl Chart for BarPlot {
    fn title(&self) -> &str {
        &self.title
    }

    fn svg(&self) -> io::Result<String> {
        // A label on the line itself would sit among the bars; the legend
        // names the references instead.
        let references = self
            .references
            .iter()
            .enumerate()
            .map(|(k, (_, label))| (label.clone(), reference_colour(k), Swatch::Dashed));
        let legend = Legend::new(
            self.series
                .iter()
                .enumerate()
                .map(|(i, s)| (s.name.clone(), bar_colour(i), Swatch::Box))
                .chain(references)
                .collect(),
        );
        let labels = self.group_labels();
        let extra_lines = labels.iter().map(Vec::len).max().unwrap_or(1).max(1) - 1;
        let middle = CHART_HEIGHT + LINE_HEIGHT * extra_lines as u32;
        render(&self.title, &legend, middle, |area| {
            if self.log_y {
                let y: LogCoord<f64> = self.log_bounds().log_scale().into();
                self.draw_on(area, y, &labels)
            } else {
                let y: RangedCoordf64 = self.linear_bounds().into();
                self.draw_on(area, y, &labels)
            }
        })
    }
}

fn reference_colour(k: usize) -> RGBColor {
    REFERENCES[k % REFERENCES.len()]
}

/// A dashed horizontal line across `xs` at `y`.
fn draw_reference<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    xs: (f64, f64),
    y: f64,
    colour: RGBColor,
) -> Drawn
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart.draw_series(std::iter::once(DashedPathElement::new(
        vec![(xs.0, y), (xs.1, y)],
        3,
        3,
        colour.stroke_width(2),
    )))?;
    Ok(())
}

/// `text` broken at spaces into lines of at most `width` characters (a
/// longer word keeps a line to itself).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The smallest 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × 10ⁿ at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    let magnitude = 10f64.powf(v.log10().floor());
    for step in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if step * magnitude >= v {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

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

    /// Checks that `svg` is well-formed XML as far as this module's output
    /// goes (no doctype, no CDATA): every tag closed in order, attributes
    /// quoted, text free of raw `<` and of `&` outside entities. Returns
    /// the text content of every element, trimmed.
    fn well_formed(svg: &str) -> Vec<String> {
        let mut open: Vec<&str> = Vec::new();
        let mut texts = Vec::new();
        let mut rest = svg.trim_start();
        assert!(rest.starts_with("<svg"), "starts with <svg: {rest:.40}");
        let mut seen_root = false;
        while !rest.is_empty() {
            let lt = rest.find('<').unwrap_or(rest.len());
            let text = &rest[..lt];
            assert!(
                !open.is_empty() || text.trim().is_empty(),
                "text outside the root: {text:?}"
            );
            check_entities(text);
            if !text.trim().is_empty() {
                texts.push(text.trim().to_string());
            }
            rest = &rest[lt..];
            if rest.is_empty() {
                break;
            }
            let gt = rest.find('>').expect("every tag ends");
            let tag = &rest[1..gt];
            rest = &rest[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name.trim()), "closing tag matches");
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name = body.split_whitespace().next().expect("a tag name");
            check_attributes(&body[name.len()..]);
            if open.is_empty() {
                assert!(!seen_root, "one root element");
                seen_root = true;
            }
            if !self_closing {
                open.push(name);
            }
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        assert!(seen_root);
        texts
    }

    fn check_attributes(mut attrs: &str) {
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                return;
            }
            let eq = attrs.find('=').expect("attribute has a value");
            let name = attrs[..eq].trim();
            assert!(
                !name.is_empty() && !name.contains(char::is_whitespace),
                "attribute name {name:?}"
            );
            let value = &attrs[eq + 1..];
            let quote = value.chars().next().expect("a quoted value");
            assert!(quote == '"' || quote == '\'', "quoted: {value:.20}");
            let end = value[1..].find(quote).expect("closing quote") + 1;
            let v = &value[1..end];
            assert!(!v.contains('<'), "no < in attribute values");
            check_entities(v);
            attrs = &value[end + 1..];
        }
    }

    fn check_entities(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..text[i..].find(';').map_or(text.len(), |e| i + e + 1)];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity)
                    || entity.starts_with("&#"),
                "bad entity {entity:?}"
            );
        }
    }

    #[test]
    fn the_checker_rejects_broken_svg() {
        for bad in [
            "<svg><g></svg>",
            "<svg><text>a < b</text></svg>",
            "<svg><text>a & b</text></svg>",
            "<svg><rect x=1/></svg>",
            "<svg></svg><svg></svg>",
        ] {
            assert!(
                std::panic::catch_unwind(|| well_formed(bad)).is_err(),
                "accepted {bad}"
            );
        }
        assert_eq!(
            well_formed("<svg><text a=\"1\">x &amp; y</text></svg>"),
            ["x &amp; y"]
        );
    }

    #[test]
    fn nice_ceiling_rounds_up_to_a_round_number() {
        assert_eq!(nice_ceiling(0.7), 0.8);
        assert_eq!(nice_ceiling(1.3), 1.5);
        assert_eq!(nice_ceiling(260.0), 300.0);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
    }

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(wrap("one two three", 7), ["one two", "three"]);
        assert_eq!(wrap("unbreakable word", 4), ["unbreakable", "word"]);
        assert_eq!(wrap("", 10), [""]);
    }

    fn line_plot() -> LinePlot {
        LinePlot {
            title: "a < b & c".into(),
            x_label: "time (s)".into(),
            y_label: "calls".into(),
            series: vec![
                Series::line("exact", vec![(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)]),
                Series::dashed("estimate", vec![(0.0, 2.0), (1.0, 1.0), (2.0, 3.0)]),
            ],
            reference: Some((2.5, "limit 2.5".into())),
            y_max: None,
        }
    }

    #[test]
    fn line_plot_is_well_formed_and_names_its_series() {
        let svg = line_plot().svg().expect("renders");
        let texts = well_formed(&svg);
        for name in [
            "a &lt; b &amp; c",
            "exact",
            "estimate",
            "limit 2.5",
            "time (s)",
            "calls",
        ] {
            assert!(texts.iter().any(|t| t == name), "{name} missing: {texts:?}");
        }
        // The solid line is one polyline with every point; the dashed one
        // and the reference are drawn as dashes.
        assert!(svg.contains("stroke=\"#8C8C8C\""));
        assert!(svg.contains("stroke=\"#E8710A\""));
        let solid = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("#8C8C8C"))
            .map(|l| l.matches(',').count())
            .max();
        assert_eq!(solid, Some(3), "the solid line has its three points");
    }

    #[test]
    fn line_plot_skips_points_it_cannot_draw() {
        let plot = LinePlot {
            series: vec![Series::line("gaps", vec![(0.0, f64::NAN), (1.0, 1.0)])],
            ..LinePlot::default()
        };
        let svg = plot.svg().expect("renders");
        well_formed(&svg);
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn empty_plots_still_render() {
        for svg in [LinePlot::default().svg(), BarPlot::default().svg()] {
            well_formed(&svg.expect("renders"));
        }
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
                    [
                        Some(Spread::of(&[8.0, 9.0, 10.0])),
                        Some(Spread::of(&[20.0, 21.0, 23.0])),
                        Some(Spread::of(&[79.0, 80.0, 81.0])),
                    ],
                ),
                BarSeries::new("naive Mutex", [Some(138.0), None, Some(2296.0)]),
            ],
            references: vec![(100.0, "budget".into())],
            log_y,
            values: true,
        }
    }

    /// A colour as plotters writes it.
    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    /// Filled rectangles drawn in series `i`'s colour.
    fn bars_of(svg: &str, i: usize) -> usize {
        let fill = format!("fill=\"{}\"", hex(bar_colour(i)));
        svg.lines()
            .filter(|l| l.starts_with("<rect") && l.contains(&fill))
            .count()
    }

    #[test]
    fn bar_plot_is_well_formed_with_a_bar_per_value() {
        for log_y in [false, true] {
            let svg = bar_plot(log_y).svg().expect("renders");
            let texts = well_formed(&svg);
            for name in [
                "weir &lt;rows&gt;",
                "naive Mutex",
                "1 thread",
                "8 threads",
                "budget",
                "ns/event",
                "2296",
            ] {
                assert!(texts.iter().any(|t| t == name), "{name} missing: {texts:?}");
            }
            // One bar per value plus the legend's swatch; the gap stays empty.
            assert_eq!(bars_of(&svg, 0), 3 + 1, "log_y {log_y}");
            assert_eq!(bars_of(&svg, 1), 2 + 1, "log_y {log_y}");
            // Three whiskers of three strokes each.
            let whiskers = svg
                .lines()
                .filter(|l| l.starts_with("<polyline") && l.contains("stroke=\"#000000\""))
                .count();
            assert!(whiskers >= 9, "{whiskers} black strokes");
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
        let svg = plot.svg().expect("renders");
        well_formed(&svg);
        assert_eq!(bars_of(&svg, 0), 1 + 1);
        let linear = BarPlot {
            log_y: false,
            ..plot
        };
        assert_eq!(bars_of(&linear.svg().expect("renders"), 0), 2 + 1);
    }

    #[test]
    fn long_group_names_and_titles_wrap() {
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
        let texts = well_formed(&svg);
        assert!(texts.iter().all(|t| t.chars().count() <= TITLE_CHARS));
        assert!(texts.iter().filter(|t| t.starts_with("word")).count() >= 2);
        assert!(texts.iter().filter(|t| t.contains("classifier")).count() == 6);
    }
}
