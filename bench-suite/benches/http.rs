//! Criterion micro-benchmark of the tower layers' per-request cost,
//! in-process (no sockets).
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
use criterion::{Criterion, criterion_group, criterion_main};
use weir_bench_suite::http::{Variant, in_process_ns};

fn layers(c: &mut Criterion) {
    let mut group = c.benchmark_group("http/in-process");
    for variant in [
        Variant::Bare,
        Variant::RateLimited,
        Variant::RateAndInflight,
        Variant::RateAndInflightSeparately,
        Variant::RateLimitedSettled,
    ] {
        group.bench_function(format!("{variant:?}"), |b| {
            b.iter_custom(|iters| {
                let requests = u32::try_from(iters).unwrap_or(u32::MAX).max(1);
                let ns = in_process_ns(variant, requests);
                std::time::Duration::from_nanos((ns * f64::from(requests)) as u64)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, layers);
criterion_main!(benches);
