//! Line charts: series sharing axes, solid or dashed.

use super::canvas::{
    CHART_HEIGHT, Legend, Swatch, colour, draw_references, mesh, references, render, short,
};
use super::{Chart, LinePlot};
use plotters::prelude::*;
use std::io;

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
