//! Criterion micro-benchmarks of the timeout shapes (ready, pend-once, 64
//! contended tasks × 100) for weir-timeout, tokio, pingora-timeout and the
//! bare future, on a 2-worker multi-thread runtime.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;
use tokio::runtime::Runtime;
use weir_bench_suite::timeout::{self, Contender};

/// Times `n` operations of one contender.
type Shape = dyn Fn(&Runtime, Contender, u64) -> Duration;

fn shapes(c: &mut Criterion) {
    let rt = timeout::runtime();
    let contended = |rt: &Runtime, c, n| (0..n).map(|_| timeout::contended(rt, c, 64, 100)).sum();
    let shapes: [(&str, u64, &Shape); 3] = [
        ("ready", 1, &timeout::ready),
        ("pend_once", 1, &timeout::pend_once),
        ("contended", 6_400, &contended),
    ];
    for (name, elements, shape) in shapes {
        let mut group = c.benchmark_group(format!("timeout/{name}"));
        group.throughput(Throughput::Elements(elements));
        for contender in Contender::ALL {
            group.bench_function(contender.name(), |b| {
                b.iter_custom(|n| shape(&rt, contender, n))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, shapes);
criterion_main!(benches);
