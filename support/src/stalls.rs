//! A store server that stalls over and over (stopped with `SIGSTOP` for
//! part of every period, then continued), and load on any store-backed
//! limiter meanwhile: what a limit lets through when its store is slow
//! rather than down.

use crate::process::signal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use weir_store::{Backend, Source, StoreLimiter};

/// Stops the process `pid` for `stopped` of every `period` until dropped
/// (and leaves it running).
pub struct Stalling {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Stalling {
    /// Starts stalling `pid`.
    pub fn start(pid: u32, stopped: Duration, period: Duration) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if signal(pid, true).is_ok() {
                    std::thread::sleep(stopped);
                    let _ = signal(pid, false);
                }
                std::thread::sleep(period.saturating_sub(stopped));
            }
        });
        Self {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Stalling {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Units of one key `key` allowed by `limiters` (each an instance of its
/// own), from `callers` tasks per limiter checking one unit every 2 ms
/// for `run`: by the store (or a lease), and by anything else (the
/// failure policy's fallback).
pub async fn allowed<B: Backend>(
    limiters: &[StoreLimiter<B>],
    key: &str,
    callers: usize,
    run: Duration,
) -> (u32, u32) {
    let deadline = tokio::time::Instant::now() + run;
    let mut tasks = Vec::new();
    for limiter in limiters {
        for _ in 0..callers {
            let limiter = limiter.clone();
            let key = key.to_owned();
            tasks.push(tokio::spawn(async move {
                let (mut store, mut fallback) = (0u32, 0u32);
                while tokio::time::Instant::now() < deadline {
                    if let Ok(a) = limiter.check_verbose(&key, 1).await
                        && a.decision.is_allowed()
                    {
                        match a.source {
                            Source::Store | Source::Lease => store += 1,
                            _ => fallback += 1,
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (store, fallback)
            }));
        }
    }
    let (mut store, mut fallback) = (0, 0);
    for task in tasks {
        if let Ok((s, f)) = task.await {
            store += s;
            fallback += f;
        }
    }
    (store, fallback)
}

/// Checks the stated bound of a store limiter under stalls, and prints
/// the figures: `calm` and `stalled` are [`allowed`]'s counts (by the
/// store, by the fallback) of runs without and with stalls, `bound` what
/// one instance may admit in the run (burst + rate × time). Without stalls
/// the store holds the limit exactly, unless a loaded machine made calls
/// miss the timeout too (then, as under stalls, each of the `instances`
/// may admit `bound`); with them the fallback must have answered, and the
/// instances together admit at most `instances × bound`.
pub fn assert_bounded(
    store: &str,
    instances: u32,
    bound: u32,
    calm: (u32, u32),
    stalled: (u32, u32),
) {
    let ((calm_store, calm_fallback), (by_store, by_fallback)) = (calm, stalled);
    eprintln!(
        "{store}, {instances} instance(s): no stalls {} ({calm_store} by the store), stalls {} \
         ({by_store} by the store, {by_fallback} by the fallback), bound {}",
        calm_store + calm_fallback,
        by_store + by_fallback,
        bound * instances
    );
    let calm_bound = if calm_fallback == 0 {
        bound
    } else {
        bound * instances
    };
    assert!(
        calm_store + calm_fallback <= calm_bound,
        "{store}, no stalls: {calm_store} + {calm_fallback}, bound {calm_bound}"
    );
    assert!(
        by_fallback > 0,
        "{store}: the fallback never answered: the server never stalled"
    );
    assert!(
        by_store + by_fallback <= bound * instances,
        "{store}, {instances} instance(s): {by_store} by the store + {by_fallback} by the \
         fallback, bound {}",
        bound * instances
    );
}
