//! A loop of timeouts around a future that pends once: the shape to profile
//! (`perf record` this example) when working on the arm-and-cancel path.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

struct PendOnce(bool);

impl Future for PendOnce {
    type Output = u64;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        if self.0 {
            Poll::Ready(1)
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    // `bare`, `weir` or `tokio` runs only that loop once (for `perf stat`); anything
    // else runs both, three rounds.
    let only = std::env::args().nth(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        match only.as_deref() {
            Some("bare") => {
                let mut sum = 0;
                for _ in 0..n {
                    sum += PendOnce(false).await;
                }
                black_box(sum);
                return;
            }
            Some("weir") => {
                let mut sum = 0;
                for _ in 0..n {
                    sum += weir_timeout::timeout(Duration::from_secs(5), PendOnce(false))
                        .await
                        .unwrap_or(0);
                }
                black_box(sum);
                return;
            }
            Some("tokio") => {
                let mut sum = 0;
                for _ in 0..n {
                    sum += tokio::time::timeout(Duration::from_secs(5), PendOnce(false))
                        .await
                        .unwrap_or(0);
                }
                black_box(sum);
                return;
            }
            _ => {}
        }
        for round in 0..3 {
            let start = Instant::now();
            let mut sum = 0;
            for _ in 0..n {
                sum += PendOnce(false).await;
            }
            let bare = start.elapsed().as_nanos() as f64 / n as f64;
            let start = Instant::now();
            for _ in 0..n {
                sum += weir_timeout::timeout(Duration::from_secs(5), PendOnce(false))
                    .await
                    .unwrap_or(0);
            }
            let weir = start.elapsed().as_nanos() as f64 / n as f64;
            black_box(sum);
            println!(
                "round {round}: bare {bare:.1} ns, weir {weir:.1} ns, overhead {:.1} ns",
                weir - bare
            );
        }
    });
}
