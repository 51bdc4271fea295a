//! What every chart shares: colours, the embedded font, wrapped titles,
//! the legend below the plot area, the mesh, and reference lines.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::{DashedPathElement, IntoDynElement};
use plotters::prelude::*;
use std::io;

/// Series colours (0xRRGGBB); the first, grey, is for the reference the
/// others are drawn against (an exact count, the packets sent).
const COLOURS: [u32; 8] = [
    0x8c8c8c, 0xe8710a, 0x1a73e8, 0x188038, 0xa142f4, 0xd93025, 0x00897b, 0x795548,
];
/// Reference lines' colours.
const REFERENCES: [u32; 3] = [0xd93025, 0x202124, 0xa142f4];
const FONT: &str = "sans-serif";
pub(super) const WIDTH: u32 = 800;
/// Plot area and axes, between the title and the legend.
pub(super) const CHART_HEIGHT: u32 = 360;

fn rgb(c: u32) -> RGBColor {
    RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

pub(super) fn colour(i: usize) -> RGBColor {
    rgb(COLOURS[i % COLOURS.len()])
}

/// Bars have no reference series, so grey comes last.
pub(super) fn bar_colour(i: usize) -> RGBColor {
    colour(i + 1)
}

fn reference_colour(k: usize) -> RGBColor {
    rgb(REFERENCES[k % REFERENCES.len()])
}

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
pub(super) type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Registers the embedded font under the family every text names.
pub(super) fn font(size: u32) -> FontDesc<'static> {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // DejaVu Sans is a valid font; registering it cannot fail.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
    (FONT, size).into_font()
}

pub(super) fn width_of(text: &str, size: u32) -> u32 {
    font(size).box_size(text).map_or(0, |(w, _)| w)
}

/// `text` broken at spaces into lines at most `width` pixels wide in
/// `size` (a longer word keeps a line to itself).
pub(super) fn wrap(text: &str, width: u32, size: u32) -> Vec<String> {
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
pub(super) enum Swatch {
    Line,
    Dashed,
    Box,
}

pub(super) type Legend = Vec<(String, RGBColor, Swatch)>;

pub(super) fn references(
    refs: &[(f64, String)],
) -> impl Iterator<Item = (String, RGBColor, Swatch)> + '_ {
    let entry = |(k, (_, label)): (usize, &(f64, String))| {
        (label.clone(), reference_colour(k), Swatch::Dashed)
    };
    refs.iter().enumerate().map(entry)
}

/// A canvas of the wrapped title, `middle` pixels that `draw` fills, and
/// the legend in as many columns as its longest entry allows, laid out by
/// plotters' series labels.
pub(super) fn render(
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
pub(super) fn mesh<Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
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
pub(super) fn draw_references<X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
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

/// A number for a label: 1.2M, 35k, 120, 1.50, 2.0e-3.
pub(super) fn short(v: f64) -> String {
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
