//! weir-hhh against rakelimit's figures: `classify` throughput on the full
//! IPv4 and IPv6 lattices (every packet walks all twelve generalisations,
//! as in rakelimit's own benchmark with an unreachable limit), the memory of
//! the default configuration, and the paper's three scenarios replayed on a
//! simulated clock (per-second received and forwarded packets, also written
//! as CSV files next to the report).

use crate::alloc;
use crate::contest::{self, Spread};
use crate::machine;
use crate::plot::{BarPlot, BarSeries, LinePlot, Series};
use crate::report::{Report, Table, thousands};
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
/// harness: the figures issue 18 gives for comparison.
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

fn cpu_cell(t: Timing) -> String {
    t.1.map_or("n/a".to_string(), |c| format!("{c:.1}"))
}

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

/// The cost of weir-hhh's `metrics` feature on the packet path: ns per
/// packet of the same raw packets through `FourTuple::attribute` and
/// `classify` (what `classify_packet` does without the feature) and
/// through `classify_packet` (which with it also counts the parse outcome
/// in the thread's counters), alternating pass by pass, `rounds` passes
/// each. On-CPU time where the platform reports it (it excludes the time
/// other processes held the core), wall time otherwise.
fn parse_count_cost_ns<R: RandomSource>(
    rake: &Classifier<ManualClock, R>,
    packets: &[Vec<u8>],
    rounds: usize,
) -> (f64, f64) {
    let (mut uncounted, mut counted) = (0.0, 0.0);
    let ns = |t: Timing| t.1.unwrap_or(t.0);
    for _ in 0..rounds {
        uncounted += ns(time_packets(packets, 1, |p, _| {
            _ = black_box(FourTuple::attribute(p).map(|a| rake.classify(&a.tuple)))
        }));
        counted += ns(time_packets(packets, 1, |p, _| {
            _ = black_box(rake.classify_packet(p))
        }));
    }
    let rounds = rounds.max(1) as f64;
    (uncounted / rounds, counted / rounds)
}

/// ns per `Classifier::publish_metrics` call into a Prometheus recorder
/// for this thread (the feature's other cost, paid per scrape), and per
/// `stats()` call (the sums it publishes beside), `calls` each.
fn publish_cost_ns<R: RandomSource>(rake: &Classifier<ManualClock, R>, calls: u32) -> (f64, f64) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let per_call = |f: &dyn Fn()| {
        let started = Instant::now();
        (0..calls).for_each(|_| f());
        started.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    metrics::with_local_recorder(&recorder, || {
        rake.publish_metrics("bench");
        (
            per_call(&|| _ = black_box(rake.stats())),
            per_call(&|| _ = black_box(rake.publish_metrics("bench"))),
        )
    })
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
         loaded as its Go code loads it (issue 18's measurement; an empty socket filter costs {} ns there). Its paper's \
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
    let mut row = |name: &str,
                   family: &str,
                   (wall, cpu): (String, String),
                   rate: String,
                   ns: f64,
                   base: f64,
                   kib: usize| {
        table.row(format!(
            "{name} | {family} | {wall} | {cpu} | {rate} | {:.2}× its speed | {kib} KiB",
            base / ns
        ));
    };
    // Wall ns per packet for the chart: (configuration, [IPv4, IPv6]).
    let mut chart: Vec<(String, [Option<f64>; 2])> = Vec::new();
    for (name, layout, hashes, slots) in [
        ("rows 2 x 1024 (default)", Layout::Rows, 2, 1024),
        ("blocked 2 x 1024", Layout::Blocked, 2, 1024),
        ("rows 5 x 256 (rakelimit's shape)", Layout::Rows, 5, 256),
        ("rows 4 x 4096", Layout::Rows, 4, 4096),
    ] {
        report.progress(name);
        let rake = unlimited(layout, hashes, slots);
        let mut bars = [None; 2];
        for (f, (family, input, base)) in [
            ("IPv4", &v4, RAKELIMIT_TEST_RUN_NS_HERE.0),
            ("IPv6", &v6, RAKELIMIT_TEST_RUN_NS_HERE.1),
        ]
        .into_iter()
        .enumerate()
        {
            let t = time_warm(&rake, input, rounds);
            bars[f] = Some(t.0);
            let kib = rake.memory_bytes() / 1024;
            row(
                name,
                family,
                (format!("{:.1}", t.0), cpu_cell(t)),
                format!("{:.1}", 1e3 / t.0),
                t.0,
                base,
                kib,
            );
        }
        chart.push((name.to_string(), bars));
    }
    // Two threads sharing one classifier (racy cell updates, per-thread
    // counters), each on its own tuples: ns per packet per thread.
    let (shared, other) = (unlimited(Layout::Rows, 2, 1024), tuples(n, false, 3));
    let per_thread: Vec<Timing> = std::thread::scope(|scope| {
        let threads: Vec<_> = [&v4, &other]
            .map(|input| scope.spawn(|| time_warm(&shared, input, rounds)))
            .into();
        threads
            .into_iter()
            .map(|h| h.join().unwrap_or((f64::NAN, None)))
            .collect()
    });
    let ns = per_thread.iter().map(|t| t.0).sum::<f64>() / 2.0;
    let cpu: Option<Vec<f64>> = per_thread.iter().map(|t| t.1).collect();
    let cpu = cpu.map_or("n/a".to_string(), |c| {
        format!("{:.1} per thread", c.iter().sum::<f64>() / 2.0)
    });
    let name = "rows 2 x 1024, 2 threads sharing one classifier";
    let kib = shared.memory_bytes() / 1024;
    row(
        name,
        "IPv4",
        (format!("{ns:.1} per thread"), cpu),
        format!("{:.1} total", 2e3 / ns),
        ns,
        RAKELIMIT_TEST_RUN_NS_HERE.0,
        kib,
    );
    chart.push((format!("{name} (per thread)"), [Some(ns), None]));
    let rake = unlimited(Layout::Rows, 2, 1024);
    let parse = |p: &Vec<u8>, now| {
        if let Ok(t) = FourTuple::parse(p) {
            let _ = black_box(rake.classify_at(&t, Timestamp::from_nanos(now)));
        }
    };
    time_packets(&packets, 1, parse);
    let t = time_packets(&packets, rounds, parse);
    let name = "rows 2 x 1024, parse raw packet + classify";
    let kib = rake.memory_bytes() / 1024;
    row(
        name,
        "IPv4",
        (format!("{:.1}", t.0), cpu_cell(t)),
        format!("{:.1}", 1e3 / t.0),
        t.0,
        RAKELIMIT_TEST_RUN_NS_HERE.0,
        kib,
    );
    chart.push((name.to_string(), [Some(t.0), None]));
    report.table(&table);
    let series = ["IPv4", "IPv6"]
        .iter()
        .enumerate()
        .map(|(f, family)| BarSeries::new(*family, chart.iter().map(|(_, bars)| bars[f])));
    report.plot(
        "hhh-classify-cost",
        &BarPlot {
            title: "weir-hhh: user-space classify cost by configuration, beside rakelimit's BPF program on this machine".into(),
            x_label: "configuration".into(),
            y_label: "ns/packet (wall)".into(),
            groups: chart.iter().map(|(name, _)| name.clone()).collect(),
            series: series.collect(),
            references: vec![
                (RAKELIMIT_TEST_RUN_NS_HERE.0, "rakelimit's BPF program, IPv4".into()),
                (RAKELIMIT_TEST_RUN_NS_HERE.1, "rakelimit's BPF program, IPv6".into()),
            ],
            values: true,
            ..BarPlot::default()
        },
    );

    metrics_cost(report, &packets, rounds);

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
    scenarios(report);
}

/// The paper's three scenarios, replayed on a simulated clock: a summary,
/// a table of seconds, a CSV of every second, and the paper's figures
/// (received against forwarded per second, one chart per stream, the
/// legitimate stream being far smaller than the flood).
fn scenarios(report: &mut Report) {
    for (stem, title, limit, scenario) in weir_hhh::test_util::paper::all() {
        report.progress(stem);
        let rake = Classifier::builder(limit)
            .seed(7)
            .clock(ManualClock::new())
            .random(SeededRandom::new(7))
            .build()
            .expect("valid scenario configuration");
        let started = Instant::now();
        let outcome = weir_hhh::sim::run(&scenario, &rake);
        let elapsed = started.elapsed();
        let _ = std::fs::create_dir_all(report.dir());
        let _ = std::fs::write(report.dir().join(format!("{stem}.csv")), outcome.to_csv());
        let headers = outcome.streams.iter().flat_map(|s| {
            [
                format!("{} received", s.name),
                format!("{} forwarded", s.name),
            ]
        });
        let mut table = Table::with_headers(std::iter::once("second".to_owned()).chain(headers));
        let seconds = outcome.streams[0].received.len();
        let shown: Vec<usize> = if seconds <= 10 {
            (0..seconds).collect()
        } else {
            (0..5)
                .chain([10, 20, 30, 40, 50, seconds - 1])
                .filter(|&s| s < seconds)
                .collect()
        };
        for s in shown {
            let counts = outcome
                .streams
                .iter()
                .flat_map(|st| [thousands(st.received[s]), thousands(st.forwarded[s])]);
            table.cells(std::iter::once(s.to_string()).chain(counts));
        }
        let summary: Vec<String> = outcome
            .streams
            .iter()
            .map(|s| {
                format!(
                    "{}: {} received, {} forwarded ({:.1} pps after the first second), {} dropped (by level {:?})",
                    s.name,
                    thousands(s.received_total()),
                    thousands(s.forwarded_total()),
                    s.forwarded_rate_after(1),
                    thousands(s.dropped_total()),
                    s.dropped_at_level
                )
            })
            .collect();
        report.text(&format!(
            "**{title}.** {}. Simulated in {elapsed:.1?}; full per-second series in `{stem}.csv`.",
            summary.join("; ")
        ));
        report.table(&table);
        for st in &outcome.streams {
            let points = |counts: &[u64]| {
                counts
                    .iter()
                    .enumerate()
                    .map(|(s, &n)| (s as f64, n as f64))
                    .collect()
            };
            let plot = LinePlot {
                title: format!("{title}: {}", st.name),
                x_label: "time (s)".into(),
                y_label: "packets per second".into(),
                series: vec![
                    Series::line("received", points(&st.received)),
                    Series::dashed("forwarded", points(&st.forwarded)),
                ],
                ..LinePlot::default()
            };
            report.plot(&format!("{stem}-{}", st.name.replace(' ', "-")), &plot);
        }
    }
}

/// The `metrics` feature's part of the section: `classify_packet` with and
/// without its parse count, paired, and the cost of publishing.
fn metrics_cost(report: &mut Report, packets: &[Vec<u8>], rounds: usize) {
    let rake = unlimited(Layout::Rows, 2, 1024);
    parse_count_cost_ns(&rake, packets, 1); // warm up
    let runs = contest::rotate(report, "metrics cost", 1, 5, |_, _| {
        (
            parse_count_cost_ns(&rake, packets, rounds),
            publish_cost_ns(&rake, 2_000),
        )
    });
    type Run = ((f64, f64), (f64, f64));
    let spread = |f: fn(&Run) -> f64, decimals: usize| {
        Spread::of(&runs[0].iter().map(f).collect::<Vec<_>>())
            .show_each(|x| format!("{x:.decimals$}"))
    };
    let mut t = Table::new("weir-hhh `metrics`, rows 2 x 1024, IPv4 | min / median / max of 5");
    for (name, cell) in [
        (
            "attribute + classify (`classify_packet` without the feature), ns/packet on CPU",
            spread(|r| r.0.0, 1),
        ),
        (
            "`classify_packet` counting its parse outcome, ns/packet on CPU",
            spread(|r| r.0.1, 1),
        ),
        (
            "cost of the parse count (paired difference), ns/packet",
            spread(|r| r.0.1 - r.0.0, 1),
        ),
        ("`stats()`, µs per call", spread(|r| r.1.0 / 1e3, 2)),
        (
            "`publish_metrics()` into a Prometheus recorder (28 series), µs per call",
            spread(|r| r.1.1 / 1e3, 2),
        ),
    ] {
        t.cells([name.to_owned(), cell]);
    }
    report.text(
        "weir-hhh's `metrics` feature publishes on demand (`Classifier::publish_metrics`, e.g. once \
         per scrape) from the per-thread counters the classifier keeps anyway. On the packet path it \
         adds one per-thread count to `classify_packet` (the parse outcome) and one to a limited \
         packet's cold path (its generalisation); `classify` of a tuple is unchanged. Below, the same \
         raw packets through `classify_packet` and through the attribute-then-classify it is without \
         the feature, alternated pass by pass (on-CPU time), and the cost of one publish. The two \
         paths are compiled separately, so a difference of a nanosecond or two either way is code \
         layout, not the count:",
    );
    report.table(&t);
}

/// The packet the kernel filter is measured on, as `BPF_PROG_TEST_RUN` takes
/// it: a UDP datagram with 4 bytes of payload behind an Ethernet header
/// (46 bytes for IPv4, 66 for IPv6), from one of [`tuples`].
#[cfg(feature = "bpf")]
fn test_run_frame(v6: bool) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    frame.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    frame.extend_from_slice(&udp_packet(&tuples(1, v6, 1)[0], b"ping"));
    frame
}

/// User-space parse + `classify` (monotonic clock read per packet, like
/// the kernel's `bpf_ktime_get_ns`) of the IP packet in `frame`, `repeat`
/// times; the mean ns per packet. Same unreachable limit as the kernel
/// measurement.
#[cfg(feature = "bpf")]
fn time_user_same_packet(rake: &Classifier, frame: &[u8], repeat: u32) -> f64 {
    let started = Instant::now();
    for _ in 0..repeat {
        if let Ok(t) = FourTuple::parse(black_box(&frame[14..])) {
            let _ = black_box(rake.classify(&t));
        }
    }
    started.elapsed().as_nanos() as f64 / f64::from(repeat.max(1))
}

/// The kernel-filter section (`--only hhh-kernel`): its cost per packet
/// under `BPF_PROG_TEST_RUN` beside user-space parse + classify of the
/// same packet, interleaved call by call.
pub fn run_kernel(report: &mut Report) {
    report.section("weir-hhh in the kernel: the BPF socket filter under BPF_PROG_TEST_RUN");
    #[cfg(not(feature = "bpf"))]
    report.text("Not measured: weir-bench-suite was built without its `bpf` feature.");
    #[cfg(feature = "bpf")]
    {
        let (repeat, calls) = (1_000_000, 11);
        report.text(&format!(
            "One packet run {} times per `BPF_PROG_TEST_RUN` call (the kernel reports the mean), {calls} calls, \
             each followed by the same number of user-space packets: `FourTuple::parse` + `classify` (clock read \
             per packet) of the same IP packet. Ethernet-framed UDP with 4 bytes of payload (46 bytes IPv4, 66 \
             bytes IPv6); default configuration (the program compiled for 2 × 1024 rows); unreachable limit, so \
             all twelve generalisations are updated per packet; kernel clock read per packet. Best call, then \
             median (min–max) over the calls. For comparison, rakelimit's program measured the way rakelimit \
             measures it (best of 5 calls of {}) on the development VM: {} / {} ns (IPv4 / IPv6); an empty socket \
             filter {} ns.",
            thousands(u64::from(repeat)),
            thousands(u64::from(repeat)),
            RAKELIMIT_TEST_RUN_NS_HERE.0,
            RAKELIMIT_TEST_RUN_NS_HERE.1,
            EMPTY_FILTER_TEST_RUN_NS_HERE,
        ));
        let mut table = Table::new(
            "family | frame bytes | kernel filter best ns/packet | kernel filter median (min–max) \
             | user-space parse + classify median (min–max) | rakelimit BPF here ns/packet | kernel best ÷ rakelimit",
        );
        let families = [
            ("IPv4", false, RAKELIMIT_TEST_RUN_NS_HERE.0),
            ("IPv6", true, RAKELIMIT_TEST_RUN_NS_HERE.1),
        ];
        // The classifier both measurements use: the default configuration
        // with an unreachable limit, so every packet updates all twelve
        // generalisations (as rakelimit measures its program).
        let unreachable_limit = || Classifier::builder(u64::MAX >> 20).seed(1);
        // [kernel filter, user space, rakelimit] per family, for the chart.
        let mut chart: [Vec<Option<f64>>; 3] = Default::default();
        for (family, v6, rakelimit) in families {
            report.progress(family);
            let frame = test_run_frame(v6);
            let rake = unreachable_limit()
                .build()
                .expect("valid benchmark configuration");
            let kernel = weir_hhh::kernel::KernelFilter::load(unreachable_limit()).and_then(|f| {
                f.test_run(&frame, 1000)?; // warm up
                Ok(f)
            });
            let (mut kernel_ns, mut user_ns, mut failed) = (Vec::new(), Vec::new(), None);
            for _ in 0..calls {
                match kernel
                    .as_ref()
                    .map(|filter| filter.test_run(&frame, repeat))
                {
                    Ok(Ok(run)) => {
                        assert!(run.passed(), "the kernel filter dropped a benchmark packet");
                        kernel_ns.push(run.duration.as_nanos() as f64);
                    }
                    Ok(Err(e)) => failed = Some(e),
                    Err(_) => {}
                }
                user_ns.push(time_user_same_packet(&rake, &frame, repeat));
            }
            let user = Spread::of(&user_ns);
            let (best, spread, ratio) = match (&kernel, &failed) {
                (Err(e), _) | (Ok(_), Some(e)) => {
                    chart[0].push(None);
                    (format!("not measured: {e}"), String::new(), String::new())
                }
                (Ok(_), None) => {
                    let k = Spread::of(&kernel_ns);
                    chart[0].push(Some(k.min));
                    (
                        format!("{:.0}", k.min),
                        k.show(0),
                        format!("{:.2}", k.min / rakelimit),
                    )
                }
            };
            chart[1].push(Some(user.median));
            chart[2].push(Some(rakelimit));
            let (bytes, user) = (frame.len(), user.show(1));
            table.cells([
                family.into(),
                bytes.to_string(),
                best,
                spread,
                user,
                format!("{rakelimit:.0}"),
                ratio,
            ]);
        }
        report.table(&table);
        let [kernel, user, rakelimit] = chart;
        report.plot(
            "hhh-kernel-cost",
            &BarPlot {
                title: "weir-hhh: the kernel filter's cost per packet beside user space and rakelimit's BPF program".into(),
                x_label: "address family".into(),
                y_label: "ns/packet (kernel: best call; user space: median)".into(),
                groups: families.iter().map(|f| f.0.to_string()).collect(),
                series: vec![
                    BarSeries::new("weir kernel filter (BPF_PROG_TEST_RUN)", kernel),
                    BarSeries::new("weir user space: parse + classify", user),
                    BarSeries::new("rakelimit's BPF program (issue 18's measurement)", rakelimit),
                ],
                values: true,
                ..BarPlot::default()
            },
        );
    }
}
