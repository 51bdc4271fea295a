//! The shapes timed: a ready future, a future that pends once (in
//! `block_on`, in a spawned task, in many tasks at once), a bare timer
//! created, armed and dropped, and the heap a live waiter holds.

use super::{Contender, DEADLINE};
use crate::alloc;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// A future that wakes itself and pends on its first poll, then is ready:
/// one trip through the scheduler, like a read that had to wait once.
#[derive(Debug, Default)]
struct PendOnce(bool);

impl Future for PendOnce {
    type Output = u64;
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(1);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Await `fut` under `contender`'s timeout (or none); returns the value or 0.
#[inline(always)]
async fn under<F: Future<Output = u64>>(contender: Contender, fut: F) -> u64 {
    match contender {
        Contender::Bare => fut.await,
        Contender::Weir => weir_timeout::timeout(DEADLINE, fut).await.unwrap_or(0),
        Contender::Tokio => tokio::time::timeout(DEADLINE, fut).await.unwrap_or(0),
        Contender::Pingora => pingora_timeout::timeout(DEADLINE, fut).await.unwrap_or(0),
    }
}

/// `n` awaits of `make(i)` under `contender`'s timeout, one after another;
/// when they started and how long they took.
pub(super) async fn timed<F: Future<Output = u64>>(
    contender: Contender,
    n: u64,
    make: impl Fn(u64) -> F,
) -> (Instant, Duration) {
    let start = Instant::now();
    let mut sum = 0u64;
    for i in 0..n {
        sum += under(contender, make(i)).await;
    }
    black_box(sum);
    (start, start.elapsed())
}

/// The 2-worker multi-thread runtime every shape runs on.
pub fn runtime() -> Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("build the tokio runtime")
}

/// Shape 1: `n` timeouts around a ready future, awaited in `block_on` on
/// the runtime (the caller's thread drives the future; the runtime's workers
/// and time driver are there). Returns the elapsed time.
pub fn ready(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(timed(contender, n, |i| std::future::ready(black_box(i))))
        .1
}

/// Shape 2: `n` timeouts around a future that pends once, in `block_on`
/// like [`ready`]: each pend is one cheap self-wake, so the timer's own
/// arm-and-cancel cost is what shows.
pub fn pend_once(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(timed(contender, n, |_| black_box(PendOnce::default())))
        .1
}

/// Shape 2 in a spawned task on a worker: the self-wake goes through the
/// worker's run queue, and the task may move between the two workers.
pub(super) fn pend_once_spawned(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    let task = rt.spawn(timed(contender, n, |_| black_box(PendOnce::default())));
    rt.block_on(task).expect("bench task").1
}

/// Shape 3: `tasks` tasks spread over both workers, each doing `n` pend-once
/// timeouts. Returns the wall time for all `tasks × n`: from the first task
/// starting its loop to the last one finishing.
pub fn contended(rt: &Runtime, contender: Contender, tasks: u64, n: u64) -> Duration {
    rt.block_on(async move {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(tasks as usize));
        let spawn = |_| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                timed(contender, n, |_| black_box(PendOnce::default())).await
            })
        };
        let handles: Vec<_> = (0..tasks).map(spawn).collect();
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        for h in handles {
            let (start, took) = h.await.expect("bench task");
            first = Some(first.map_or(start, |f| f.min(start)));
            last = Some(last.map_or(start + took, |l| l.max(start + took)));
        }
        first
            .zip(last)
            .map_or(Duration::ZERO, |(first, last)| last - first)
    })
}

/// Create a sleep, poll it once (arming its timer), drop it: `n` times in
/// one task. Bare: just the loop.
pub(super) fn create_drop(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    let task = rt.spawn(async move {
        let mut cx = Context::from_waker(Waker::noop());
        let start = Instant::now();
        for _ in 0..n {
            match contender {
                Contender::Bare => _ = black_box(&mut cx),
                Contender::Weir => {
                    _ = black_box(std::pin::pin!(weir_timeout::sleep(DEADLINE)).poll(&mut cx))
                }
                Contender::Tokio => {
                    _ = black_box(std::pin::pin!(tokio::time::sleep(DEADLINE)).poll(&mut cx))
                }
                Contender::Pingora => {
                    _ = black_box(std::pin::pin!(pingora_timeout::sleep(DEADLINE)).poll(&mut cx))
                }
            }
        }
        start.elapsed()
    });
    rt.block_on(task).expect("bench task")
}

/// Heap bytes per live (armed, pending) waiter, beyond the future itself,
/// and the future's size. Arms `n` sleeps held in a pre-allocated vector.
pub(super) fn memory_per_waiter(rt: &Runtime, contender: Contender, n: usize) -> (f64, usize) {
    fn hold<F: Future>(n: usize, make: impl Fn() -> F) -> (f64, usize) {
        let mut held: Vec<Pin<Box<F>>> = Vec::with_capacity(n);
        let mut cx = Context::from_waker(Waker::noop());
        let ((), stats) = alloc::measure(|| {
            for _ in 0..n {
                let mut f = Box::pin(make());
                let _ = f.as_mut().poll(&mut cx);
                held.push(f);
            }
        });
        let size = std::mem::size_of::<F>();
        (
            stats.peak_bytes.saturating_sub(n * size) as f64 / n as f64,
            size,
        )
    }
    let task = rt.spawn(async move {
        match contender {
            Contender::Bare => (0.0, 0),
            Contender::Weir => hold(n, || weir_timeout::sleep(DEADLINE)),
            Contender::Tokio => hold(n, || tokio::time::sleep(DEADLINE)),
            Contender::Pingora => hold(n, || pingora_timeout::sleep(DEADLINE)),
        }
    });
    rt.block_on(task).expect("bench task")
}
