//! Line charts as standalone SVG files, for the report's plots (the Criteo
//! post's sliding-window comparisons, the rakelimit paper's received vs
//! forwarded packets). Hand-written rather than a plotting crate so that a
//! fresh machine needs no font or graphics libraries: text is left to the
//! SVG viewer.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// One line of a chart.
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

/// A chart of one or more series sharing axes.
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
}

const COLOURS: [&str; 6] = [
    "#8c8c8c", "#e8710a", "#1a73e8", "#188038", "#a142f4", "#d93025",
];
const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 70.0;

impl LinePlot {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let points = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
        for &(x, y) in points {
            x0 = x0.min(x);
            x1 = x1.max(x);
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
        let y0 = 0.0;
        let y1 = nice_ceiling(if y1.is_finite() && y1 > 0.0 {
            y1 * 1.05
        } else {
            1.0
        });
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * plot_w;
        let sy = |y: f64| TOP + plot_h - (y - y0) / (y1 - y0) * plot_h;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        // Grid and ticks.
        for i in 0..=5 {
            let y = y0 + (y1 - y0) * f64::from(i) / 5.0;
            let py = sy(y);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                py + 4.0,
                short(y)
            );
            let x = x0 + (x1 - x0) * f64::from(i) / 5.0;
            let px = sx(x);
            let _ = writeln!(
                svg,
                r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#e0e0e0"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP,
                TOP + plot_h,
                TOP + plot_h + 16.0,
                short(x)
            );
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            TOP + plot_h + 36.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
            TOP + plot_h / 2.0,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        if let Some((y, label)) = &self.reference {
            let py = sy(*y);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#d93025" stroke-dasharray="2,3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#d93025">{}</text>"##,
                LEFT + plot_w,
                LEFT + plot_w - 4.0,
                py - 4.0,
                escape(label)
            );
        }
        for (i, series) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let mut path = String::new();
            for (j, &(x, y)) in series.points.iter().enumerate() {
                let _ = write!(
                    path,
                    "{}{:.1},{:.1} ",
                    if j == 0 { "M" } else { "L" },
                    sx(x),
                    sy(y)
                );
            }
            let dash = if series.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                r#"<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>"#
            );
            // Legend below the axis label, left to right.
            let lx = LEFT + (i as f64) * (plot_w / self.series.len().max(1) as f64);
            let ly = HEIGHT - 12.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
                ly - 4.0,
                lx + 24.0,
                ly - 4.0,
                lx + 28.0,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// Write the chart to `path`.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.svg())
    }
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
    } else {
        format!("{v:.2}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceiling_rounds_up_to_a_round_number() {
        assert_eq!(nice_ceiling(0.7), 0.8);
        assert_eq!(nice_ceiling(1.3), 1.5);
        assert_eq!(nice_ceiling(260.0), 300.0);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
    }

    #[test]
    fn svg_has_one_path_per_series_and_escapes_text() {
        let plot = LinePlot {
            title: "a < b".into(),
            series: vec![
                Series::line("x", vec![(0.0, 1.0), (1.0, 2.0)]),
                Series::dashed("y", vec![(0.0, 2.0), (1.0, 1.0)]),
            ],
            ..LinePlot::default()
        };
        let svg = plot.svg();
        assert_eq!(svg.matches("<path").count(), 2);
        assert!(svg.contains("a &lt; b"));
        assert!(svg.contains("stroke-dasharray=\"6,4\""));
    }

    #[test]
    fn empty_plot_still_renders() {
        let svg = LinePlot::default().svg();
        assert!(svg.starts_with("<svg"));
    }
}
