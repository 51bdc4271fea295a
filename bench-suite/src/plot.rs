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

/// A chart the report saves as an SVG file, its title the image's alt text.
pub(crate) trait Chart {
    fn title(&self) -> &str;

    fn svg(&self) -> io::Result<String>;
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
        let name = name.into();
        let dashed = false;
        Self {
            name,
            points,
            dashed,
        }
    }

    pub(crate) fn dashed(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        let dashed = true;
        Self {
            dashed,
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

/// Series colours (0xRRGGBB); the first, grey, is for the reference the
/// others are drawn against (an exact count, the packets sent).
const COLOURS: [u32; 8] = [
    0x8c8c8c, 0xe8710a, 0x1a73e8, 0x188038, 0xa142f4, 0xd93025, 0x00897b, 0x795548,
];
/// Reference lines' colours.
const REFERENCES: [u32; 3] = [0xd93025, 0x202124, 0xa142f4];
const FONT: &str = "sans-serif";
const WIDTH: u32 = 800;
/// Plot area and axes, between the title and the legend.
const CHART_HEIGHT: u32 = 360;

fn rgb(c: u32) -> RGBColor {
    RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

fn colour(i: usize) -> RGBColor {
    rgb(COLOURS[i % COLOURS.len()])
}

/// Bars have no reference series, so grey comes last.
fn bar_colour(i: usize) -> RGBColor {
    colour(i + 1)
}

fn reference_colour(k: usize) -> RGBColor {
    rgb(REFERENCES[k % REFERENCES.len()])
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
    let entry = |(k, (_, label)): (usize, &(f64, String))| {
        (label.clone(), reference_colour(k), Swatch::Dashed)
    };
    refs.iter().enumerate().map(entry)
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
    for (k, (y, _)) in refs.iter().enumerate() {
        let (line, style) = (
            [(xs.0, *y), (xs.1, *y)],
            reference_colour(k).stroke_width(2),
        );
        chart.draw_series(DashedLineSeries::new(line, 3, 3, style))?;
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
        let bars = self.series.iter().flat_map(|s| s.1.iter().flatten());
        let bars = bars.flat_map(|&Bar(value, whisker)| {
            let (lo, hi) = whisker.unwrap_or((value, value));
            [value, lo, hi]
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
                .1
                .iter()
                .take(n)
                .enumerate()
                .filter_map(|(g, b)| Some((g, b.filter(|b| drawable(b.0))?)));
            for (g, bar) in bars {
                let x0 = g as f64 + 0.12 + i as f64 * slot;
                let mid = x0 + slot * 0.43;
                let base = if self.log_y { bottom } else { 0.0 };
                chart.draw_series([Rectangle::new(
                    [(x0, base), (x0 + slot * 0.86, bar.0)],
                    bar_colour(i).filled(),
                )])?;
                let mut top = bar.0;
                if let Some((lo, hi)) = bar.1.filter(|w| drawable(w.0) && drawable(w.1)) {
                    let whisker =
                        ErrorBar::new_vertical(mid, lo, bar.0, hi, BLACK.stroke_width(1), 6);
                    chart.draw_series([whisker])?;
                    top = top.max(hi);
                }
                if self.values {
                    let style = font(10)
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom));
                    chart.draw_series([
                        EmptyElement::at((mid, top)) + Text::new(short(bar.0), (0, -3), style)
                    ])?;
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
            .map(|(i, s)| (s.0.clone(), bar_colour(i), Swatch::Box));
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
            .filter_map(|t| Some(t.split_once("</text")?.0.trim()))
            .collect()
    }

    /// Filled rectangles in series `i`'s colour (its bars and its legend swatch).
    fn bars_of(svg: &str, i: usize) -> usize {
        let RGBColor(r, g, b) = bar_colour(i);
        let fill = format!("fill=\"#{r:02X}{g:02X}{b:02X}\"");
        svg.lines()
            .filter(|l| l.starts_with("<rect") && l.contains(&fill))
            .count()
    }

    #[test]
    fn line_plot_escapes_and_names_its_series_and_reference() {
        let plot = LinePlot {
            title: "a < b & c".into(),
            series: vec![
                Series::line(
                    "exact",
                    vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 1.5)],
                ),
                Series::dashed("estimate", vec![(0.0, 2.0), (1.0, 1.0)]),
            ],
            references: vec![(2.5, "limit 2.5".into())],
            ..LinePlot::default()
        };
        let svg = plot.svg().expect("renders");
        for text in ["a &lt; b &amp; c", "exact", "estimate", "limit 2.5"] {
            assert!(texts(&svg).contains(&text), "{text} missing");
        }
        // The solid line is one polyline of its three drawable points.
        let solid = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("#8C8C8C"));
        assert_eq!(solid.map(|l| l.matches(',').count()).max(), Some(3));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn bar_plots_draw_a_bar_and_error_bar_per_value_and_leave_out_what_a_log_axis_cannot_show() {
        for log_y in [false, true] {
            let plot = BarPlot {
                groups: vec!["1 thread".into(), "2 threads".into(), "8 threads".into()],
                series: vec![
                    BarSeries::new(
                        "weir <rows>",
                        [8.0, 20.0, 79.0].map(|m| Some(Spread::of(&[m, m + 2.0]))),
                    ),
                    BarSeries::new("naive", [Some(-1.0), None, Some(2296.0)]),
                ],
                references: vec![(100.0, "budget".into())],
                log_y,
                values: true,
                ..BarPlot::default()
            };
            let svg = plot.svg().expect("renders");
            for text in ["weir &lt;rows&gt;", "naive", "8 threads", "budget", "2296"] {
                assert!(
                    texts(&svg).contains(&text),
                    "{text} missing (log_y {log_y})"
                );
            }
            // A bar per drawable value and the legend's swatch; the gap stays empty.
            let naive = if log_y { 1 } else { 2 };
            assert_eq!(
                (bars_of(&svg, 0), bars_of(&svg, 1)),
                (3 + 1, naive + 1),
                "log_y {log_y}"
            );
            let strokes = svg
                .lines()
                .filter(|l| l.starts_with("<line") && l.contains("#000000"));
            assert!(
                strokes.count() >= 3 * 3,
                "three error bars of three strokes"
            );
        }
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
    }
}
