//! Drawing every chart: the wrapped title, the plot area with its mesh and
//! dashed reference lines, and the legend below in as many columns as its
//! longest entry allows, each column laid out by plotters' series labels.

use super::{Bar, BarPlot, Chart, LinePlot};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::{DashedPathElement, IntoDynElement};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::io;

/// Series colours (0xRRGGBB); the first, grey, is for the reference a line
/// chart's others are drawn against (an exact count, the packets sent).
const COLOURS: [u32; 8] = [
    0x8c8c8c, 0xe8710a, 0x1a73e8, 0x188038, 0xa142f4, 0xd93025, 0x00897b, 0x795548,
];
const REFERENCES: [u32; 3] = [0xd93025, 0x202124, 0xa142f4];
const FONT: &str = "sans-serif";
pub(super) const WIDTH: u32 = 800;
/// Plot area and axes, between the title and the legend.
const CHART_HEIGHT: u32 = 360;

fn rgb(palette: &[u32], i: usize) -> RGBColor {
    let c = palette[i % palette.len()];
    RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// Bars have no reference series, so grey comes last.
pub(super) fn bar_colour(i: usize) -> RGBColor {
    rgb(&COLOURS, i + 1)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;
type Chart2d<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

/// The embedded font, registered under the family every text names.
fn font(size: u32) -> FontDesc<'static> {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // DejaVu Sans is a valid font; registering it cannot fail.
    REGISTERED.call_once(|| {
        _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
    });
    (FONT, size).into_font()
}

pub(super) fn width_of(text: &str, size: u32) -> u32 {
    font(size).box_size(text).map_or(0, |(w, _)| w)
}

/// `text` broken at spaces into lines at most `width` pixels wide in
/// `size` (a longer word keeps a line to itself): plotters' captions and
/// axis labels are single lines.
fn wrap(text: &str, width: u32, size: u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if width_of(&format!("{line} {word}"), size) <= width => {
                *line += &format!(" {word}");
            }
            _ => lines.push(word.to_owned()),
        }
    }
    if lines.is_empty() {
        vec![String::new()]
    } else {
        lines
    }
}

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    Line,
    Dashed,
    Box,
}

type Legend = Vec<(String, RGBColor, Swatch)>;

/// `entries`' legend followed by the reference lines'.
fn legend(
    entries: impl Iterator<Item = (String, RGBColor, Swatch)>,
    refs: &[(f64, String)],
) -> Legend {
    let refs = refs.iter().enumerate();
    entries
        .chain(refs.map(|(k, r)| (r.1.clone(), rgb(&REFERENCES, k), Swatch::Dashed)))
        .collect()
}

/// A canvas of the wrapped title, `middle` pixels that `draw` fills, and
/// the legend.
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
    let longest = legend.iter().map(|e| width_of(&e.0, 12)).max().unwrap_or(0);
    let columns = ((WIDTH - 20) / (longest + 60)).clamp(1, legend.len().max(1) as u32) as usize;
    let rows = legend.len().div_ceil(columns).max(1);
    let legend_height = if legend.is_empty() {
        0
    } else {
        rows as u32 * 15 + 16
    };
    let mut svg = String::new();
    let drawn = (|| -> Drawn {
        let height = 8 + line * title.len() as u32 + middle + legend_height;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut area = root.margin(8, 0, 0, 0);
        for text in &title {
            area = area.titled(text, font(16))?;
        }
        let (chart, bottom) = area.split_vertically(middle);
        draw(&chart)?;
        let columns = bottom.margin(0, 0, 10, 10).split_evenly((1, columns));
        for (column, entries) in columns.iter().zip(legend.chunks(rows)) {
            let mut key = ChartBuilder::on(column).build_cartesian_2d(0..1, 0..1)?;
            for &(ref name, colour, swatch) in entries {
                let series = key.draw_series(std::iter::empty::<Circle<(i32, i32), i32>>())?;
                series.label(name).legend(move |(x, y)| {
                    let (stroke, line) = (colour.stroke_width(2), vec![(x, y), (x + 24, y)]);
                    match swatch {
                        Swatch::Line => PathElement::new(line, stroke).into_dyn(),
                        Swatch::Dashed => DashedPathElement::new(line, 6, 4, stroke).into_dyn(),
                        Swatch::Box => {
                            Rectangle::new([(x, y - 5), (x + 22, y + 5)], colour.filled())
                                .into_dyn()
                        }
                    }
                });
            }
            let mut labels = key.configure_series_labels();
            labels
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

/// The plot area every chart shares: a light grid, the axes' titles, short
/// y labels (`tweak` sets the rest), what `draw` draws, and over it a
/// dashed line across at each reference.
fn frame<'b, Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
    area: &Area<'b>,
    (x, y): (std::ops::Range<f64>, Y),
    (x_label, y_label, x_area): (&str, &str, u32),
    refs: &[(f64, String)],
    tweak: impl FnOnce(&mut plotters::chart::MeshStyle<'_, '_, RangedCoordf64, Y, SVGBackend<'b>>),
    draw: impl FnOnce(&mut Chart2d<'_, 'b, Y>) -> Drawn,
) -> Drawn {
    let xs = (x.start, x.end);
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(16)
        .margin_top(8)
        .x_label_area_size(x_area)
        .y_label_area_size(56);
    let mut chart = builder.build_cartesian_2d(x, y)?;
    let mut mesh = chart.configure_mesh();
    mesh.max_light_lines(0)
        .bold_line_style(RGBColor(0xe0, 0xe0, 0xe0));
    mesh.y_label_formatter(&|v| short(*v))
        .label_style(font(12))
        .axis_desc_style(font(13));
    tweak(mesh.x_desc(x_label).y_desc(y_label));
    mesh.draw()?;
    draw(&mut chart)?;
    for (k, (y, _)) in refs.iter().enumerate() {
        let style = rgb(&REFERENCES, k).stroke_width(2);
        chart.draw_series(DashedLineSeries::new([(xs.0, *y), (xs.1, *y)], 3, 3, style))?;
    }
    Ok(())
}

/// A number for a label: 1.2M, 35k, 120, 1.50, 2.0e-3.
fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e4 => format!("{:.0}k", v / 1e3),
        a if a >= 10.0 || v == v.trunc() => format!("{v:.0}"),
        a if a >= 0.01 => format!("{v:.2}"),
        _ => format!("{v:.1e}"),
    }
}

impl Chart for LinePlot {
    fn title(&self) -> &str {
        &self.title
    }

    fn svg(&self) -> io::Result<String> {
        let swatch = |dashed| if dashed { Swatch::Dashed } else { Swatch::Line };
        let entries = self.series.iter().enumerate();
        let legend = legend(
            entries.map(|(i, s)| (s.name.clone(), rgb(&COLOURS, i), swatch(s.dashed))),
            &self.references,
        );
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
        // An axis that starts near zero starts at zero.
        let (x0, x1) = match (x0, x1) {
            (x0, x1) if x0 >= x1 => (0.0, 1.0),
            (x0, x1) if x0 > 0.0 && x0 < (x1 - x0) * 0.05 => (0.0, x1),
            range => range,
        };
        let ys = points()
            .map(|p| p.1)
            .chain(self.references.iter().map(|r| r.0));
        let (y0, y1) = ys.fold((0.0f64, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
        let y1 = self.y_max.unwrap_or(if y1 > 0.0 { y1 * 1.08 } else { 1.0 });
        render(&self.title, &legend, CHART_HEIGHT, |area| {
            let axes = (x0..x1, (y0 * 1.08..y1).into());
            let labels = (self.x_label.as_str(), self.y_label.as_str(), 44);
            let tweak = |m: &mut plotters::chart::MeshStyle<'_, '_, _, _, _>| {
                m.x_labels(8).y_labels(6).x_label_formatter(&|v| short(*v));
            };
            frame::<RangedCoordf64>(area, axes, labels, &self.references, tweak, |chart| {
                for (i, series) in self.series.iter().enumerate() {
                    let points: Vec<(f64, f64)> =
                        series.points.iter().filter(finite).copied().collect();
                    let style = rgb(&COLOURS, i).stroke_width(2);
                    if series.dashed {
                        chart.draw_series(DashedLineSeries::new(points, 6, 4, style))?;
                    } else {
                        chart.draw_series(LineSeries::new(points, style))?;
                    }
                }
                Ok(())
            })
        })
    }
}

impl BarPlot {
    /// Bar heights, error-bar ends and references: what the axis must show.
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let bars = self.series.iter().flat_map(|s| s.1.iter().flatten());
        let bars = bars.flat_map(|&Bar(v, whisker)| {
            let (lo, hi) = whisker.unwrap_or((v, v));
            [v, lo, hi]
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
        let axes = (0.0..n as f64, y);
        let tweak = |m: &mut plotters::chart::MeshStyle<'_, '_, _, _, _>| {
            m.disable_x_mesh().x_labels(0).y_labels(8);
        };
        let names = (
            self.x_label.as_str(),
            self.y_label.as_str(),
            34 + 15 * lines,
        );
        frame(area, axes, names, &self.references, tweak, |chart| {
            // Group names, wrapped to their group's width, under the axis.
            let style = font(12)
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top));
            for (g, label) in labels.iter().enumerate() {
                chart.draw_series(label.iter().enumerate().map(|(i, line)| {
                    EmptyElement::at((g as f64 + 0.5, bottom))
                        + Text::new(line.clone(), (0, 6 + 15 * i as i32), style.clone())
                }))?;
            }
            let drawable = |v: f64| v.is_finite() && (!self.log_y || v > 0.0);
            let slot = 0.76 / self.series.len().max(1) as f64;
            let base = if self.log_y { bottom } else { 0.0 };
            for (i, series) in self.series.iter().enumerate() {
                let bars = series.1.iter().take(n).enumerate();
                for (g, bar) in bars.filter_map(|(g, b)| Some((g, b.filter(|b| drawable(b.0))?))) {
                    let x0 = g as f64 + 0.12 + i as f64 * slot;
                    let mid = x0 + slot * 0.43;
                    let fill = bar_colour(i).filled();
                    chart.draw_series([Rectangle::new(
                        [(x0, base), (x0 + slot * 0.86, bar.0)],
                        fill,
                    )])?;
                    let mut top = bar.0;
                    if let Some((lo, hi)) = bar.1.filter(|w| drawable(w.0) && drawable(w.1)) {
                        chart.draw_series([ErrorBar::new_vertical(
                            mid,
                            lo,
                            bar.0,
                            hi,
                            BLACK.stroke_width(1),
                            6,
                        )])?;
                        top = top.max(hi);
                    }
                    if self.values {
                        let style = font(10)
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Bottom));
                        let value = Text::new(short(bar.0), (0, -3), style);
                        chart.draw_series([EmptyElement::at((mid, top)) + value])?;
                    }
                }
            }
            Ok(())
        })
    }
}

impl Chart for BarPlot {
    fn title(&self) -> &str {
        &self.title
    }

    fn svg(&self) -> io::Result<String> {
        let entries = self.series.iter().enumerate();
        let legend = legend(
            entries.map(|(i, s)| (s.0.clone(), bar_colour(i), Swatch::Box)),
            &self.references,
        );
        let group_px = (WIDTH - 96) / self.groups.len().max(1) as u32;
        let labels: Vec<Vec<String>> = self
            .groups
            .iter()
            .map(|g| wrap(g, group_px - 8, 12))
            .collect();
        let lines = labels.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
        render(
            &self.title,
            &legend,
            CHART_HEIGHT + 15 * (lines - 1),
            |area| {
                if self.log_y {
                    // What a log axis cannot show (zero, negatives) is left out.
                    let positive = || self.values().filter(|v| *v > 0.0);
                    let lo = positive().fold(f64::INFINITY, f64::min);
                    let (lo, hi) = if lo.is_finite() {
                        let lo = 10f64.powf(lo.log10().floor());
                        (lo, (positive().fold(0.0, f64::max) * 1.6).max(lo * 10.0))
                    } else {
                        (1.0, 10.0)
                    };
                    self.draw_on(area, LogCoord::from((lo..hi).log_scale()), &labels)
                } else {
                    let headroom = if self.values { 1.12 } else { 1.05 };
                    let (lo, hi) = self
                        .values()
                        .fold((0.0f64, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
                    let hi = if hi > 0.0 { hi * headroom } else { 1.0 };
                    self.draw_on(area, RangedCoordf64::from(lo * headroom..hi), &labels)
                }
            },
        )
    }
}
