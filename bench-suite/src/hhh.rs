//! weir-hhh against rakelimit's figures: `classify` throughput on the full
//! IPv4 and IPv6 lattices (every packet walks all twelve generalisations,
//! as in rakelimit's own benchmark with an unreachable limit), the memory of
//! the default configuration, and the paper's three scenarios replayed on a
//! simulated clock (per-second received and forwarded packets, also written
//! as CSV files next to the report).

mod kernel;
mod metrics;
mod scenarios;

pub use kernel::run_kernel;

use crate::harness::alloc;
use crate::harness::machine;
use crate::harness::plot::{BarPlot, BarSeries};
use crate::harness::report::{Report, Table, thousands};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;
use weir_hhh::random::{RandomSource, SeededRandom};
use weir_hhh::test_util::udp_packet;
use weir_hhh::{Classifier, FourTuple};
use weir_limits::clock::{ManualClock, Timestamp};
use weir_limits::{Layout, Shape};

/// rakelimit's BPF program under `BPF_PROG_TEST_RUN` on this development
/// VM, ns per packet (IPv4, IPv6), and an empty socket filter in the same
/// harness: the figures rakelimit's paper gives for comparison.
const RAKELIMIT_TEST_RUN_NS_HERE: (f64, f64) = (218.0, 240.0);
const EMPTY_FILTER_TEST_RUN_NS_HERE: f64 = 26.0;

/// rakelimit's BPF program, ns per packet, as its paper published it (on
/// another machine): quoted for reference, never compared against.
const RAKELIMIT_PUBLISHED_NS: (f64, f64) = (385.0, 417.0);

/// `n` tuples towards one server address and port from random sources
/// (addresses in a /8, random ports): every generalisation sees many keys.
pub fn tuples(n: usize, v6: bool, seed: u64) -> Vec<FourTuple> {
    let tuple = |i: u64| {
        let r = weir_primitives::random::SplitMix64::new(seed ^ i).next_u64();
        let port = (r >> 48) as u16 | 1;
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            let src = Ipv6Addr::from((0x2001_0db8u128 << 96) | u128::from(r & 0xffff_ffff_ffff));
            (
                src.into(),
                Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1).into(),
            )
        } else {
            (
                Ipv4Addr::from(0x0a00_0000 | (r as u32 & 0x00ff_ffff)).into(),
                Ipv4Addr::new(192, 0, 2, 1).into(),
            )
        };
        FourTuple::from_socket_addrs(SocketAddr::new(src, port), SocketAddr::new(dst, 443))
    };
    (0..n as u64).map(tuple).collect()
}

/// A classifier whose limit is never reached (every packet walks all twelve
/// generalisations), with the given sketch shape.
pub fn unlimited(
    layout: Layout,
    hashes: usize,
    slots: usize,
) -> Classifier<ManualClock, SeededRandom> {
    Classifier::builder(u64::MAX >> 20)
        .shape(Shape::try_new(hashes, slots, layout).expect("valid benchmark shape"))
        .seed(1)
        .clock(ManualClock::new())
        .random(SeededRandom::new(1))
        .build()
        .expect("valid benchmark configuration")
}

/// Wall-clock and on-CPU ns per packet of one timed run (on CPU where the
/// platform reports it).
type Timing = (f64, Option<f64>);

/// Feed every item `rounds` times to `each` with a simulated clock
/// advancing 100 ns per packet (10 M packets/s); wall and on-CPU ns per
/// packet.
fn time_packets<T>(items: &[T], rounds: usize, mut each: impl FnMut(&T, u64)) -> Timing {
    let mut now = 1_000_000_000u64;
    let (cpu0, started) = (machine::thread_cpu_nanos(), Instant::now());
    for _ in 0..rounds {
        for item in items {
            now += 100;
            each(black_box(item), now);
        }
    }
    let packets = (rounds * items.len()) as f64;
    let cpu = cpu0
        .zip(machine::thread_cpu_nanos())
        .map(|(a, b)| b.saturating_sub(a) as f64 / packets);
    (started.elapsed().as_nanos() as f64 / packets, cpu)
}

/// Classify every tuple `rounds` times, 100 ns of simulated time apart
/// (10 M packets/s).
fn time_classify<R: RandomSource>(
    rake: &Classifier<ManualClock, R>,
    tuples: &[FourTuple],
    rounds: usize,
) -> Timing {
    time_packets(tuples, rounds, |t, now| {
        _ = black_box(rake.classify_at(t, Timestamp::from_nanos(now)))
    })
}

/// [`time_classify`] after one pass to warm up.
fn time_warm<R: RandomSource>(
    rake: &Classifier<ManualClock, R>,
    tuples: &[FourTuple],
    rounds: usize,
) -> Timing {
    time_classify(rake, tuples, 1);
    time_classify(rake, tuples, rounds)
}

/// The weir-hhh section of the report.
pub fn run(report: &mut Report) {
    report.section("weir-hhh: fair-share flood limiter (rakelimit's algorithm)");
    let (n, rounds) = (1 << 16, report.scale().pick(8, 60));
    let (v4, v6) = (tuples(n, false, 1), tuples(n, true, 2));
    let packets: Vec<Vec<u8>> = v4
        .iter()
        .map(|t| udp_packet(t, b"0123456789abcdef"))
        .collect();
    report.text(&format!(
        "`classify_at` with an unreachable limit, so every packet updates all 12 generalisations \
         (rakelimit benchmarks its BPF program the same way). {} distinct tuples (sources in a /8 or \
         a /80, random ports, one server address), {rounds} passes, simulated clock advancing 100 ns per \
         packet, one thread unless noted. The comparison column is against rakelimit's own BPF program on this \
         machine: {} ns (IPv4) / {} ns (IPv6) per packet under `BPF_PROG_TEST_RUN`, kernel-reported, its shipped object \
         loaded as its Go code loads it (an empty socket filter costs {} ns there). Its paper's \
         {} / {} ns were measured on another machine and would overstate the lead. \"On CPU\" is the thread's scheduled CPU time (Linux \
         schedstat), which excludes time other processes held the core on a shared machine.",
        thousands(n as u64),
        RAKELIMIT_TEST_RUN_NS_HERE.0,
        RAKELIMIT_TEST_RUN_NS_HERE.1,
        EMPTY_FILTER_TEST_RUN_NS_HERE,
        RAKELIMIT_PUBLISHED_NS.0,
        RAKELIMIT_PUBLISHED_NS.1,
    ));
    let mut table = Table::new(
        "configuration | family | ns/packet (wall) | ns/packet (on CPU) | M packets/s (wall) | vs rakelimit BPF here (wall) | sketch memory",
    );
    // Wall ns per packet for the chart: (configuration, [IPv4, IPv6]).
    let mut chart: Vec<(String, [Option<f64>; 2])> = Vec::new();
    let mut row = |name: &str, v6: bool, threads: f64, (wall, cpu): Timing, kib: usize| {
        let (family, base) = if v6 {
            ("IPv6", RAKELIMIT_TEST_RUN_NS_HERE.1)
        } else {
            ("IPv4", RAKELIMIT_TEST_RUN_NS_HERE.0)
        };
        let each = if threads > 1.0 { " per thread" } else { "" };
        let cpu = cpu.map_or("n/a".to_string(), |c| format!("{c:.1}{each}"));
        let rate = format!(
            "{:.1}{}",
            threads * 1e3 / wall,
            if threads > 1.0 { " total" } else { "" }
        );
        let speed = base / wall;
        table.row(format!("{name} | {family} | {wall:.1}{each} | {cpu} | {rate} | {speed:.2}× its speed | {kib} KiB"));
        let label = if threads > 1.0 {
            format!("{name} (per thread)")
        } else {
            name.to_owned()
        };
        match chart.last_mut() {
            Some((last, bars)) if *last == label => bars[1] = Some(wall),
            _ => chart.push((label, [Some(wall), None])),
        }
    };
    for (name, layout, hashes, slots) in [
        ("rows 2 x 1024 (default)", Layout::Rows, 2, 1024),
        ("blocked 2 x 1024", Layout::Blocked, 2, 1024),
        ("rows 5 x 256 (rakelimit's shape)", Layout::Rows, 5, 256),
        ("rows 4 x 4096", Layout::Rows, 4, 4096),
    ] {
        report.progress(name);
        let rake = unlimited(layout, hashes, slots);
        for (v6, input) in [(false, &v4), (true, &v6)] {
            row(
                name,
                v6,
                1.0,
                time_warm(&rake, input, rounds),
                rake.memory_bytes() / 1024,
            );
        }
    }
    // Two threads sharing one classifier (racy cell updates, per-thread
    // counters), each on its own tuples: ns per packet per thread.
    let (shared, other) = (unlimited(Layout::Rows, 2, 1024), tuples(n, false, 3));
    let per_thread: Vec<Timing> = std::thread::scope(|scope| {
        let threads = [&v4, &other].map(|input| scope.spawn(|| time_warm(&shared, input, rounds)));
        threads
            .into_iter()
            .map(|h| h.join().unwrap_or((f64::NAN, None)))
            .collect()
    });
    let cpu: Option<Vec<f64>> = per_thread.iter().map(|t| t.1).collect();
    let mean = (
        per_thread.iter().map(|t| t.0).sum::<f64>() / 2.0,
        cpu.map(|c| c.iter().sum::<f64>() / 2.0),
    );
    let name = "rows 2 x 1024, 2 threads sharing one classifier";
    row(name, false, 2.0, mean, shared.memory_bytes() / 1024);
    let rake = unlimited(Layout::Rows, 2, 1024);
    let parse = |p: &Vec<u8>, now| {
        if let Ok(t) = FourTuple::parse(p) {
            let _ = black_box(rake.classify_at(&t, Timestamp::from_nanos(now)));
        }
    };
    time_packets(&packets, 1, parse);
    let t = time_packets(&packets, rounds, parse);
    row(
        "rows 2 x 1024, parse raw packet + classify",
        false,
        1.0,
        t,
        rake.memory_bytes() / 1024,
    );
    report.table(&table);
    let series = ["IPv4", "IPv6"]
        .iter()
        .enumerate()
        .map(|(f, family)| BarSeries::new(*family, chart.iter().map(|(_, bars)| bars[f])));
    let title = "weir-hhh: user-space classify cost by configuration, beside rakelimit's BPF program on this machine";
    let groups = chart.iter().map(|(name, _)| name.clone()).collect();
    let plot = BarPlot::new(
        title,
        "configuration",
        "ns/packet (wall)",
        groups,
        series.collect(),
    );
    let references = vec![
        (
            RAKELIMIT_TEST_RUN_NS_HERE.0,
            "rakelimit's BPF program, IPv4".into(),
        ),
        (
            RAKELIMIT_TEST_RUN_NS_HERE.1,
            "rakelimit's BPF program, IPv6".into(),
        ),
    ];
    report.plot("hhh-classify-cost", &BarPlot { references, ..plot });

    metrics::metrics_cost(report, &packets, rounds);

    let (built, stats) = alloc::measure(|| Classifier::try_new(1000));
    let default_bytes = built.as_ref().map(|c| c.memory_bytes()).unwrap_or(0);
    time_classify(&rake, &v4, 1);
    let (_, per_packet) = alloc::measure(|| time_classify(&rake, &v4, 1));
    report.text(&format!(
        "Memory of the default configuration (12 sketches x 2 hashes x 1024 slots x 16-byte cells): \
         {} bytes by `memory_bytes()`, {} bytes peak heap / {} allocations when built. \
         Classifying {} packets allocated {} times.",
        thousands(default_bytes as u64),
        thousands(stats.peak_bytes as u64),
        stats.allocations,
        thousands(v4.len() as u64),
        per_packet.allocations
    ));
    scenarios::scenarios(report);
}
