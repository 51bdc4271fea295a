//! Batching concurrent callers' decisions into shared script calls.
//!
//! Callers put `(key, cost, reply)` on a bounded queue. One task waits for
//! a free in-flight slot, then drains whatever is queued (up to
//! `max_batch`), groups it by Cluster slot (a script may only touch keys
//! of one slot; on a single server everything is one group), and spawns
//! one script call per group. While all slots are busy the queue fills, so
//! batches grow exactly when Redis is the bottleneck, and a lone caller
//! pays no batching delay.
//!
//! Deadlines are kept per call, not per caller: each job carries its
//! deadline, the batcher answers jobs whose deadline has passed with
//! [`RedisLimitError::Timeout`] without sending them, and a script call
//! may take until the earliest deadline among its jobs. A waiting job is
//! therefore answered by its deadline: every call ahead of it holds only
//! older jobs, so it ends (or times out) no later. One timer per script
//! call instead of one per decision is a measurable share of the client's
//! time per decision at high rates.

use super::{Batching, Core, Raw, RedisLimitError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, oneshot};

type Reply = oneshot::Sender<Result<Raw, RedisLimitError>>;

struct Job {
    key: String,
    cost: u32,
    deadline: Instant,
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

    /// Queue one decision and wait for it; answered within `timeout`
    /// (see the module documentation).
    pub(crate) async fn submit(
        &self,
        key: String,
        cost: u32,
        timeout: Duration,
    ) -> Result<Raw, RedisLimitError> {
        let (reply, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        self.tx
            .try_send(Job {
                key,
                cost,
                deadline,
                reply,
            })
            .map_err(|_| RedisLimitError::Overloaded)?;
        // The batching task only drops a job's sender unanswered when it
        // is itself gone.
        rx.await.unwrap_or(Err(RedisLimitError::Overloaded))
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

async fn decide(core: &Core, batch: Vec<Job>) {
    let now = Instant::now();
    let (mut batch, late): (Vec<Job>, Vec<Job>) =
        batch.into_iter().partition(|job| job.deadline > now);
    for job in late {
        let _ = job.reply.send(Err(RedisLimitError::Timeout(core.timeout)));
    }
    let Some(first) = batch.iter().map(|j| j.deadline).min() else {
        return;
    };
    // The scripts decide a repeated key from one read of its state, which
    // needs its decisions adjacent; a stable sort keeps them in arrival
    // order.
    batch.sort_by(|a, b| a.key.cmp(&b.key));
    let keys: Vec<&str> = batch.iter().map(|j| j.key.as_str()).collect();
    let costs: Vec<u32> = batch.iter().map(|j| j.cost).collect();
    match core.eval_within(&keys, &costs, first - now).await {
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
