//! The kernel filter's section: its cost per packet under
//! `BPF_PROG_TEST_RUN`, beside user space and rakelimit's program.

use crate::harness::report::Report;
#[cfg(feature = "bpf")]
use {
    super::{EMPTY_FILTER_TEST_RUN_NS_HERE, RAKELIMIT_TEST_RUN_NS_HERE, tuples},
    crate::harness::contest::Spread,
    crate::harness::plot::{BarPlot, BarSeries},
    crate::harness::report::{Table, thousands},
    std::hint::black_box,
    std::time::Instant,
    weir_hhh::test_util::udp_packet,
    weir_hhh::{Classifier, FourTuple},
};

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
                    let (best, ratio) =
                        (format!("{:.0}", k.min), format!("{:.2}", k.min / rakelimit));
                    (best, k.show(0), ratio)
                }
            };
            chart[1].push(Some(user.median));
            chart[2].push(Some(rakelimit));
            let (bytes, user) = (frame.len(), user.show(1));
            table.row(format!(
                "{family} | {bytes} | {best} | {spread} | {user} | {rakelimit:.0} | {ratio}"
            ));
        }
        report.table(&table);
        let [kernel, user, rakelimit] = chart;
        let series = vec![
            BarSeries::new("weir kernel filter (BPF_PROG_TEST_RUN)", kernel),
            BarSeries::new("weir user space: parse + classify", user),
            BarSeries::new("rakelimit's BPF program", rakelimit),
        ];
        let title = "weir-hhh: the kernel filter's cost per packet beside user space and rakelimit's BPF program";
        let groups = families.iter().map(|f| f.0.to_string()).collect();
        let y_label = "ns/packet (kernel: best call; user space: median)";
        report.plot(
            "hhh-kernel-cost",
            &BarPlot::new(title, "address family", y_label, groups, series),
        );
    }
}
