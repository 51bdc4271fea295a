//! How late sleeps of 3–99 ms fire: percentiles and the cumulative
//! distribution of each contender's lateness.

use super::Contender;
use crate::contest;
use crate::plot::{LinePlot, Series};
use crate::report::{Report, Table};
use crate::workload;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// Lateness (actual minus requested) of sleeps of 3–99 ms: `tasks` tasks
/// each sleeping `rounds` times for pseudo-random durations. Returns the
/// sorted latenesses in microseconds; negative would mean early.
fn lateness(rt: &Runtime, contender: Contender, tasks: u64, rounds: u64) -> Vec<i64> {
    let task = |t: u64| {
        rt.spawn(async move {
            let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut out = Vec::new();
            for _ in 0..rounds {
                let d = Duration::from_micros(3_000 + workload::xorshift(&mut x) % 96_000);
                let start = Instant::now();
                match contender {
                    Contender::Bare | Contender::Tokio => tokio::time::sleep(d).await,
                    Contender::Weir => weir_timeout::sleep(d).await,
                    Contender::Pingora => pingora_timeout::sleep(d).await,
                }
                out.push(start.elapsed().as_micros() as i64 - d.as_micros() as i64);
            }
            out
        })
    };
    let handles: Vec<_> = (0..tasks).map(task).collect();
    let mut all: Vec<i64> = rt.block_on(async {
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("lateness task"));
        }
        all
    });
    all.sort_unstable();
    all
}

/// The lateness table and chart.
pub(super) fn section(report: &mut Report, rt: &Runtime) {
    let scale = report.scale();
    let (tasks, rounds_per_task) = (scale.pick(300u64, 1_000), scale.pick(4u64, 20));
    let mut t = Table::new("sleep 3–99 ms | samples | lateness p50 ms | p99 ms | max ms | min ms");
    let mut distributions = Vec::new();
    for c in [Contender::Weir, Contender::Pingora, Contender::Tokio] {
        report.progress(&format!("lateness of {}", c.name()));
        let l = lateness(rt, c, tasks, rounds_per_task);
        let ms = |p| contest::quantile(&l, p).unwrap_or(0) as f64 / 1000.0;
        let [p50, p99, max, min] = [0.5, 0.99, 1.0, 0.0].map(ms);
        let (name, n) = (c.name(), l.len());
        t.row(format!(
            "{name} | {n} | {p50:.2} | {p99:.2} | {max:.2} | {min:.2}"
        ));
        distributions.push(Series::line(c.name(), cumulative_ms(&l)));
    }
    report.table(&t);
    report.text(
        "Lateness is actual minus requested sleep; a negative minimum would mean a timer \
         fired early. weir and pingora round deadlines up to a 10 ms tick; tokio's wheel has \
         1 ms resolution.",
    );
    report.plot(
        "timeout-lateness",
        &LinePlot {
            title: "weir-timeout: lateness of 3–99 ms sleeps (cumulative distribution)".into(),
            x_label: "lateness (ms): actual minus requested sleep".into(),
            y_label: "% of sleeps at most this late".into(),
            series: distributions,
            y_max: Some(100.0),
            references: Vec::new(),
        },
    );
}

/// The cumulative distribution of `sorted` (µs) as points (ms, % at or
/// below), one per permille: enough for the curve at a fraction of the file.
fn cumulative_ms(sorted: &[i64]) -> Vec<(f64, f64)> {
    let point = |k: usize| {
        let i = ((sorted.len() - 1) * k).div_ceil(1000);
        (
            sorted[i] as f64 / 1000.0,
            (i + 1) as f64 * 100.0 / sorted.len() as f64,
        )
    };
    if sorted.is_empty() {
        Vec::new()
    } else {
        (0..=1000).map(point).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::cumulative_ms;

    #[test]
    fn cumulative_distribution_runs_from_the_first_sample_to_all_of_them() {
        let sorted: Vec<i64> = (1..=10).map(|i| i * 1000).collect();
        let points = cumulative_ms(&sorted);
        assert_eq!(
            (points.first(), points.last()),
            (Some(&(1.0, 10.0)), Some(&(10.0, 100.0)))
        );
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
        );
        assert!(cumulative_ms(&[]).is_empty());
    }
}
