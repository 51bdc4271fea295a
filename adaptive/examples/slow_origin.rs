//! An adaptive limit in front of a slow origin: the origin works on 8
//! requests at once, 10 ms each, and queues the rest. Forty callers
//! offer far more than that; the limit learns to let about what the
//! origin can take through and answers the rest at once, so the ones let
//! through are not stuck in the origin's queue.
//!
//! ```sh
//! cargo run -p weir-adaptive --example slow_origin
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use weir_adaptive::{AdaptiveLimiter, Gradient2};

/// The origin: `capacity` requests at once, `work` each, the rest queued.
struct Origin {
    workers: Semaphore,
    work: Duration,
}

impl Origin {
    async fn serve(&self) {
        let _worker = self.workers.acquire().await.expect("never closed");
        tokio::time::sleep(self.work).await;
    }
}

#[tokio::main]
async fn main() {
    let origin = Arc::new(Origin {
        workers: Semaphore::new(8),
        work: Duration::from_millis(10),
    });
    let limit = Arc::new(AdaptiveLimiter::new(Gradient2::default()));
    let (served, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let end = Instant::now() + Duration::from_secs(4);
    for _ in 0..40 {
        let (origin, limit) = (Arc::clone(&origin), Arc::clone(&limit));
        let (served, refused) = (Arc::clone(&served), Arc::clone(&refused));
        tokio::spawn(async move {
            while Instant::now() < end {
                match limit.try_acquire() {
                    Ok(guard) => {
                        origin.serve().await;
                        guard.success(); // reports the latency it saw
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_overloaded) => {
                        // A proxy answers 503 here; this caller waits a little.
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            }
        });
    }
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!(
            "limit {:3}  in flight {:3}  no-load latency {:>9}  served {:5}  refused {:6}",
            limit.limit(),
            limit.in_flight(),
            limit
                .no_load()
                .map_or("-".into(), |d| format!("{:.1} ms", d.as_secs_f64() * 1e3)),
            served.swap(0, Ordering::Relaxed),
            refused.swap(0, Ordering::Relaxed),
        );
    }
}
