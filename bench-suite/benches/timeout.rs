//! Criterion micro-benchmarks of the three timeout shapes (ready, pend-once,
//! contended) for weir-timeout, tokio, pingora-timeout and the bare future,
//! on a 2-worker multi-thread runtime.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_bench_suite::timeout::{self, Contender};

fn shapes(c: &mut Criterion) {
    let rt = timeout::runtime();
    let mut group = c.benchmark_group("timeout/ready");
    group.throughput(Throughput::Elements(1));
    for contender in Contender::ALL {
        group.bench_function(contender.name(), |b| {
            b.iter_custom(|n| timeout::ready(&rt, contender, n))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("timeout/pend_once");
    group.throughput(Throughput::Elements(1));
    for contender in Contender::ALL {
        group.bench_function(contender.name(), |b| {
            b.iter_custom(|n| timeout::pend_once(&rt, contender, n))
        });
    }
    group.finish();

    // 64 tasks × 100 timeouts per iteration.
    let mut group = c.benchmark_group("timeout/contended");
    group.throughput(Throughput::Elements(6_400));
    for contender in Contender::ALL {
        group.bench_function(contender.name(), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| timeout::contended(&rt, contender, 64, 100))
                    .sum()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, shapes);
criterion_main!(benches);
