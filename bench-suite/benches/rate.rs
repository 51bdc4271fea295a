//! Criterion micro-benchmarks of one keyed check over uniformly drawn keys:
//! weir's keyed limiters against governor's, single-threaded.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_bench_suite::rate::{contenders, keys};

/// One keyed check per pre-generated key, for every contender.
fn keyed_check(c: &mut Criterion) {
    let keys = keys(1 << 16);
    let mut group = c.benchmark_group("rate/keyed_check");
    group.throughput(Throughput::Elements(keys.len() as u64));
    for contender in contenders() {
        let limiter = (contender.build)();
        group.bench_function(contender.name, |b| {
            b.iter(|| {
                let mut allowed = 0u32;
                for &k in &keys {
                    allowed += u32::from(limiter.check(k));
                }
                std::hint::black_box(allowed)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, keyed_check);
criterion_main!(benches);
