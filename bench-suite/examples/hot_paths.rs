//! The hot paths a refactor must not slow down, one figure a call, for
//! comparing two builds of weir run in turn (the report's sections measure
//! each against its competitors instead):
//!
//! `cargo run --release -p weir-bench-suite --example hot_paths -- WHAT [PORT]`
//! with WHAT one of `allows-uniform`, `allows-zipf` (a keyed GCRA's
//! `allows` on 1 M keys), `check-uniform` (its `check`, the whole
//! `Decision`), `tiered-check-uniform` (the same through a
//! `TieredLimiter`, a cheap resolver placing every tenth key in another
//! tier), `tiered-cached-uniform` (its resolver a `CachedTierOf` holding
//! every key), `sketch-check-uniform` and `tiered-sketch-check-uniform`
//! (a `SketchLimiter`'s check, then a `TieredSketch`'s), `sharded-incr`, `pend-once` (a timeout around a
//! future that pends once, over the bare future, with tokio's beside it),
//! `redis-plain`, `redis-batched` (50 callers on the redis-server at PORT)
//! or `pingpong` (the cross-core round trip, to read two-thread figures by).
//! To compare with an older commit, copy this file into a worktree of it
//! and alternate the two binaries (an older commit may need
//! `#![recursion_limit = "512"]` for the Redis callers' futures).
use rand::{Rng, SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, Zipf};
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use weir_limits::{Shape, ShardedEstimator};
use weir_rate::{
    CachedTierOf, Gcra, KeyedLimiter, Quota, SketchLimiter, Tier, TierOf, TieredLimiter,
    TieredSketch, nonzero,
};

const KEYS: u64 = 1_000_000;

fn keys(zipf: bool, n: usize) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(7);
    if zipf {
        let z = Zipf::new(KEYS as f64, 1.0).unwrap();
        (0..n).map(|_| z.sample(&mut rng) as u64).collect()
    } else {
        (0..n).map(|_| rng.random_range(0..KEYS)).collect()
    }
}

fn keyed_allows(zipf: bool) -> f64 {
    keyed(zipf, |limiter, k| {
        black_box(limiter.allows(k));
    })
}

/// A keyed GCRA's `check` on 1 M uniform keys: the whole `Decision` built
/// and dropped, as a layer asks.
fn keyed_check() -> f64 {
    keyed(false, |limiter, k| {
        black_box(limiter.check(k));
    })
}

fn keyed(zipf: bool, call: impl Fn(&KeyedLimiter<u64, Gcra>, &u64)) -> f64 {
    let limiter: KeyedLimiter<u64, Gcra> =
        KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(1000))));
    let ks = keys(zipf, 1 << 22);
    for k in &ks {
        call(&limiter, k);
    } // warm: every key present
    let start = Instant::now();
    let rounds = 3;
    for _ in 0..rounds {
        for k in &ks {
            call(&limiter, k);
        }
    }
    start.elapsed().as_nanos() as f64 / (rounds * ks.len()) as f64
}

/// Every tenth key paid, the rest free: a resolver that costs a modulo.
struct EveryTenth;

impl TierOf<u64> for EveryTenth {
    fn tier_of<'a>(&'a self, key: &u64) -> Option<&'a str> {
        key.is_multiple_of(10).then_some("paid")
    }
}

fn api_tiers() -> Vec<Tier<Gcra>> {
    vec![
        Tier::limited("free", Gcra::new(Quota::per_second(nonzero!(1000)))),
        Tier::limited("paid", Gcra::new(Quota::per_second(nonzero!(10_000)))),
    ]
}

/// `call` on each of 4 M uniform draws of 1 M keys, warmed once, in ns.
fn timed<L>(limiter: &L, call: impl Fn(&L, &u64)) -> f64 {
    let ks = keys(false, 1 << 22);
    for k in &ks {
        call(limiter, k);
    }
    let start = Instant::now();
    let rounds = 3;
    for _ in 0..rounds {
        for k in &ks {
            call(limiter, k);
        }
    }
    start.elapsed().as_nanos() as f64 / (rounds * ks.len()) as f64
}

fn tiered_check(cached: bool) -> f64 {
    if cached {
        let lookup = |key: &u64| key.is_multiple_of(10).then(|| "paid".to_owned());
        let resolver = CachedTierOf::new(
            lookup,
            std::num::NonZeroUsize::new(4 << 20).unwrap(),
            Duration::from_secs(3600),
        );
        let limiter = TieredLimiter::<u64, _, _>::try_new(api_tiers(), "free", resolver).unwrap();
        timed(&limiter, |l, k| {
            black_box(l.check(k));
        })
    } else {
        let limiter = TieredLimiter::<u64, _, _>::try_new(api_tiers(), "free", EveryTenth).unwrap();
        timed(&limiter, |l, k| {
            black_box(l.check(k));
        })
    }
}

fn sketch_check(tiered: bool) -> f64 {
    let shape = Shape::rows::<4, 65536>();
    if tiered {
        let limiter = TieredSketch::try_new(api_tiers(), "free", EveryTenth, shape).unwrap();
        timed(&limiter, |l, k| {
            black_box(l.check(k));
        })
    } else {
        let limiter = SketchLimiter::new(Quota::per_second(nonzero!(1000)), shape);
        timed(&limiter, |l, k| {
            black_box(l.check(k));
        })
    }
}

fn sharded_incr() -> f64 {
    let est = ShardedEstimator::new(Shape::rows::<4, 4096>());
    let ks = keys(false, 1 << 22);
    for k in &ks {
        black_box(est.incr(k, 1));
    }
    let start = Instant::now();
    let rounds = 5;
    for _ in 0..rounds {
        for k in &ks {
            black_box(est.incr(k, 1));
        }
    }
    start.elapsed().as_nanos() as f64 / (rounds * ks.len()) as f64
}

/// Pending once (waking itself), then ready.
struct PendOnce(bool);
impl Future for PendOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn pend_once() -> (f64, f64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 200_000u32;
    rt.block_on(async {
        for _ in 0..200_000 {
            let _ = weir_timeout::timeout(Duration::from_secs(1), PendOnce(false)).await;
        }
        let (mut w, mut t) = (Vec::new(), Vec::new());
        for _ in 0..25 {
            let s = Instant::now();
            for _ in 0..n {
                PendOnce(false).await;
            }
            let bare = s.elapsed().as_nanos() as f64 / f64::from(n);
            let s = Instant::now();
            for _ in 0..n {
                let _ =
                    black_box(weir_timeout::timeout(Duration::from_secs(1), PendOnce(false)).await);
            }
            let weir = s.elapsed().as_nanos() as f64 / f64::from(n);
            let s = Instant::now();
            for _ in 0..n {
                let _ =
                    black_box(tokio::time::timeout(Duration::from_secs(1), PendOnce(false)).await);
            }
            let tokio_ = s.elapsed().as_nanos() as f64 / f64::from(n);
            w.push(weir - bare);
            t.push(tokio_ - bare);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        (med(&mut w), med(&mut t))
    })
}

fn redis(port: u16, batched: bool) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut b =
            weir_redis::RedisLimiter::builder(Gcra::new(Quota::per_second(nonzero!(1_000_000))))
                .prefix(if batched { "hpb" } else { "hpp" });
        if batched {
            b = b.batching(weir_redis::Batching::default());
        }
        let limiter = b
            .connect(weir_redis::Target::server(format!(
                "redis://127.0.0.1:{port}/"
            )))
            .await
            .unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let run = Duration::from_secs(3);
        let start = Instant::now();
        let tasks: Vec<_> = (0..50u64)
            .map(|t| {
                let (limiter, done) = (limiter.clone(), Arc::clone(&done));
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while start.elapsed() < run {
                        let key = format!("k{}", (t * 7919 + i) % 10_000);
                        black_box(limiter.check(&key).await);
                        done.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    })
}

/// Two threads bouncing one atomic: the cross-core round trip (ns).
fn pingpong() -> f64 {
    let flag = Arc::new(AtomicU64::new(0));
    let other = Arc::clone(&flag);
    let n = 1_000_000u64;
    let t = std::thread::spawn(move || {
        for i in 0..n {
            while other.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    let start = Instant::now();
    for i in 0..n {
        flag.store(2 * i + 1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    t.join().unwrap();
    ns
}

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_default();
    match what.as_str() {
        "allows-uniform" => println!("{what} {:.1} ns", keyed_allows(false)),
        "allows-zipf" => println!("{what} {:.1} ns", keyed_allows(true)),
        "check-uniform" => println!("{what} {:.1} ns", keyed_check()),
        "tiered-check-uniform" => println!("{what} {:.1} ns", tiered_check(false)),
        "tiered-cached-uniform" => println!("{what} {:.1} ns", tiered_check(true)),
        "sketch-check-uniform" => println!("{what} {:.1} ns", sketch_check(false)),
        "tiered-sketch-check-uniform" => println!("{what} {:.1} ns", sketch_check(true)),
        "sharded-incr" => println!("{what} {:.2} ns", sharded_incr()),
        "pend-once" => {
            let (w, t) = pend_once();
            println!("{what} weir {w:.1} ns tokio {t:.1} ns ratio {:.3}", w / t)
        }
        "redis-plain" | "redis-batched" => {
            let port: u16 = args.next().unwrap().parse().unwrap();
            println!(
                "{what} {:.0} decisions/s",
                redis(port, what == "redis-batched")
            )
        }
        "pingpong" => println!("{what} {:.0} ns", pingpong()),
        _ => eprintln!("what?"),
    }
}
