//! Criterion micro-benchmarks of one keyed check over uniformly drawn keys:
//! weir's keyed limiters against governor's, single-threaded; and what
//! [`AnyLimiter`](weir_rate::AnyLimiter)'s indirection adds to an
//! in-process check through the async seam.
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

/// The async seam a tower layer calls, on one in-process limiter: the
/// limiter's own future, and the same limiter behind `AnyLimiter`,
/// interleaved in one group.
fn any_limiter(c: &mut Criterion) {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    use weir_rate::{AnyLimiter, CheckKeyAsync, Gcra, KeyedLimiter, Quota};

    fn decide<F: Future + Unpin>(mut f: F) -> F::Output {
        match Pin::new(&mut f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => unreachable!("in process, a check is ready at once"),
        }
    }
    let keys = keys(1 << 16);
    let quota =
        Quota::per_second(std::num::NonZeroU32::new(1000).unwrap_or(std::num::NonZeroU32::MIN));
    let direct = KeyedLimiter::<u32, _>::new(Gcra::new(quota));
    let any: AnyLimiter<u32> = AnyLimiter::new(KeyedLimiter::<u32, _>::new(Gcra::new(quota)));
    let mut group = c.benchmark_group("rate/any_limiter");
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function("KeyedLimiter", |b| {
        b.iter(|| {
            let mut allowed = 0u32;
            for k in &keys {
                allowed +=
                    u32::from(decide(direct.check_n_async(k, 1)).is_ok_and(|d| d.is_allowed()));
            }
            std::hint::black_box(allowed)
        })
    });
    group.bench_function("AnyLimiter<KeyedLimiter>", |b| {
        b.iter(|| {
            let mut allowed = 0u32;
            for k in &keys {
                allowed += u32::from(decide(any.check_n_async(k, 1)).is_ok_and(|d| d.is_allowed()));
            }
            std::hint::black_box(allowed)
        })
    });
    group.finish();
}

criterion_group!(benches, keyed_check, any_limiter);
criterion_main!(benches);
