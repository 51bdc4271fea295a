use super::draw::{WIDTH, bar_colour, width_of};
use super::*;
use plotters::style::RGBColor;

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
            "a rather long configuration name, two threads sharing one classifier".into();
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
