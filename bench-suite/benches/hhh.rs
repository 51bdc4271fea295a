//! Criterion micro-benchmarks of weir-hhh's `classify_at` on the full IPv4
//! and IPv6 lattices (unreachable limit: all twelve generalisations updated
//! per packet), and of parsing a raw packet first.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use weir_bench_suite::hhh::{tuples, unlimited};
use weir_hhh::FourTuple;
use weir_hhh::test_util::udp_packet;
use weir_limits::Layout;
use weir_limits::clock::Timestamp;

fn classify(c: &mut Criterion) {
    let mut group = c.benchmark_group("hhh/classify");
    for (family, v6) in [("ipv4", false), ("ipv6", true)] {
        let input = tuples(1 << 14, v6, 1);
        group.throughput(Throughput::Elements(input.len() as u64));
        for (name, layout) in [("rows", Layout::Rows), ("blocked", Layout::Blocked)] {
            let rake = unlimited(layout, 2, 1024);
            let mut now = 1_000_000_000u64;
            group.bench_function(format!("{family}/{name}"), |b| {
                b.iter(|| {
                    for t in &input {
                        now += 100;
                        let _ = black_box(rake.classify_at(t, Timestamp::from_nanos(now)));
                    }
                })
            });
        }
    }
    let input = tuples(1 << 14, false, 1);
    let packets: Vec<Vec<u8>> = input.iter().map(|t| udp_packet(t, b"payload")).collect();
    let rake = unlimited(Layout::Rows, 2, 1024);
    let mut now = 1_000_000_000u64;
    group.throughput(Throughput::Elements(packets.len() as u64));
    group.bench_function("ipv4/parse+rows", |b| {
        b.iter(|| {
            for p in &packets {
                now += 100;
                if let Ok(t) = FourTuple::parse(p) {
                    let _ = black_box(rake.classify_at(&t, Timestamp::from_nanos(now)));
                }
            }
        })
    });
    group.finish();
}

criterion_group!(benches, classify);
criterion_main!(benches);
