//! Grouped bar charts with min–max error bars, on a linear or a
//! logarithmic axis.

use super::canvas::{
    Area, CHART_HEIGHT, Drawn, Legend, Swatch, WIDTH, bar_colour, draw_references, font, mesh,
    references, render, short, wrap,
};
use super::{Bar, BarPlot, Chart};
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::io;

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
