//! Criterion micro-benchmarks of one `incr` on the blog's workload: weir's
//! estimators against pingora-limits, single-threaded.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_bench_suite::harness::workload;
use weir_bench_suite::limits::contenders;

/// One `incr` per pre-generated key, for every contender.
fn incr(c: &mut Criterion) {
    let keys = workload::uniform(1 << 16, 1);
    let mut group = c.benchmark_group("limits/incr");
    group.throughput(Throughput::Elements(keys.len() as u64));
    for contender in contenders() {
        let counter = (contender.build)();
        group.bench_function(contender.name, |b| {
            b.iter(|| {
                for &k in &keys {
                    counter.incr(k);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, incr);
criterion_main!(benches);
