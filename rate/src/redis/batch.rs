//! Batching concurrent callers' decisions into shared script calls.
//!
//! Callers put `(key, cost, reply)` on a bounded queue. One task waits for
//! a free in-flight slot, then drains whatever is queued (up to
//! `max_batch`), groups it by Cluster slot (a script may only touch keys
//! of one slot; on a single server everything is one group), and spawns
//! one script call per group. While all slots are busy the queue fills, so
//! batches grow exactly when Redis is the bottleneck, and a lone caller
//! pays no batching delay.

use super::{Batching, Core, Raw, RedisLimitError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};

type Reply = oneshot::Sender<Result<Raw, RedisLimitError>>;

struct Job {
    key: String,
    cost: u32,
    reply: Reply,
}

/// The caller's side: the queue into the batching task. Dropping it ends
/// the task once the queue is drained.
pub(crate) struct Batcher {
    tx: mpsc::Sender<Job>,
}

impl Batcher {
    /// Spawn the batching task on the current tokio runtime.
    pub(crate) fn start(core: Arc<Core>, cfg: Batching) -> Self {
        let (tx, rx) = mpsc::channel(cfg.queue);
        tokio::spawn(run(core, rx, cfg));
        Self { tx }
    }

    /// Queue one decision and wait for it, at most `timeout`.
    pub(crate) async fn submit(
        &self,
        key: String,
        cost: u32,
        timeout: Duration,
    ) -> Result<Raw, RedisLimitError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Job { key, cost, reply })
            .map_err(|_| RedisLimitError::Overloaded)?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(RedisLimitError::Overloaded),
            Err(_) => Err(RedisLimitError::Timeout(timeout)),
        }
    }
}

async fn run(core: Arc<Core>, mut rx: mpsc::Receiver<Job>, cfg: Batching) {
    let slots = Arc::new(Semaphore::new(cfg.max_in_flight));
    let mut jobs: Vec<Job> = Vec::with_capacity(cfg.max_batch);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut jobs, cfg.max_batch).await == 0 {
            return; // every sender is gone
        }
        if !core.cluster {
            let batch = std::mem::replace(&mut jobs, Vec::with_capacity(cfg.max_batch));
            let core = core.clone();
            tokio::spawn(async move {
                decide(&core, batch).await;
                drop(permit);
            });
            continue;
        }
        let mut groups: HashMap<u16, Vec<Job>> = HashMap::new();
        for job in jobs.drain(..) {
            groups
                .entry(super::cluster_slot(&job.key))
                .or_default()
                .push(job);
        }
        let mut permit = Some(permit);
        for (_, batch) in groups {
            let p = match permit.take() {
                Some(p) => p,
                None => match slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let core = core.clone();
            tokio::spawn(async move {
                decide(&core, batch).await;
                drop(p);
            });
        }
    }
}

async fn decide(core: &Core, mut batch: Vec<Job>) {
    // The scripts decide a repeated key from one read of its state, which
    // needs its decisions adjacent; a stable sort keeps them in arrival
    // order.
    batch.sort_by(|a, b| a.key.cmp(&b.key));
    let keys: Vec<&str> = batch.iter().map(|j| j.key.as_str()).collect();
    let costs: Vec<u32> = batch.iter().map(|j| j.cost).collect();
    match core.eval(&keys, &costs).await {
        Ok(raws) => {
            for (job, raw) in batch.into_iter().zip(raws) {
                let _ = job.reply.send(Ok(raw));
            }
        }
        Err(e) => {
            for job in batch {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
    }
}
