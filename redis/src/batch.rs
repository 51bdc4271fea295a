//! Batching concurrent callers' decisions into shared script calls.
//!
//! Callers put `(key, cost, deadline, reply)` on a bounded queue (the key
//! is the base of a key's Redis keys: one per limit of an all-of set, all
//! in one Cluster slot). One task
//! waits for a free in-flight slot, then drains whatever is queued (up to
//! `max_batch`), groups it by Cluster slot (a script may only touch keys
//! of one slot; on a single server everything is one group), and spawns
//! one script call per group. While all slots are busy the queue fills, so
//! batches grow exactly when Redis is the bottleneck, and a lone caller
//! pays no batching delay.
//!
//! # Deadlines
//!
//! Every caller is answered by its own deadline, yet there is one timer
//! per script call, not one per caller (a timer per decision was a
//! measurable share of the client's time per decision at high rates):
//!
//! * a call waits for Redis alongside a single sleep set to the earliest
//!   deadline among its callers still waiting; when it fires, those past
//!   their deadline get [`RedisLimitError::Timeout`] and the sleep moves
//!   to the next deadline, so a caller close to its deadline never cuts
//!   short the others in its batch;
//! * callers already late when their batch is cut are answered without
//!   being sent, and a group waiting for a slot (Cluster) answers its late
//!   callers while it waits;
//! * so are callers that waited in the queue while a call for their server
//!   (or Cluster slot) failed or was slow, unless at least half a timeout
//!   (what "slow" means) is left to them: they get that failure at once.
//!   Otherwise a stalled server would be sent, slot by slot as calls are
//!   given up at their callers' deadlines, a stream of scripts each sent
//!   with moments to spare and given up at once (which it would still run,
//!   and charge, when it wakes). Callers asked after the failure meet the
//!   back-off before they are queued;
//! * a queued caller waits behind calls holding older callers only (the
//!   queue is drained in order, a drain's groups go out by earliest
//!   deadline), and each such call ends by its latest deadline, no later
//!   than the queued caller's own.
//!
//! A script a caller gave up on may still run on Redis and count its
//! units, as with any timeout on a request already sent.

use super::{Core, RedisLimitError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use weir_rate::Decision;

/// Settings for the batching path ([`RedisLimiterBuilder::batching`](super::RedisLimiterBuilder::batching)).
///
/// ```
/// use weir_redis::{Batching, RedisLimiter};
/// use weir_rate::{Gcra, Quota};
///
/// let quota = Quota::per_second(std::num::NonZeroU32::new(100).unwrap());
/// // Up to 64 decisions a call, 4 calls in flight, 4096 callers queued.
/// let batching = Batching { max_batch: 64, max_in_flight: 4, queue: 4096 };
/// let builder = RedisLimiter::builder(Gcra::new(quota)).batching(batching);
/// # let _ = builder;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Most decisions in one script call (at least 1; any larger value
    /// is bounded by the queue in practice).
    pub max_batch: usize,
    /// Most script calls in flight at once (per limiter; at least 1, at
    /// most 2⁶¹ − 1).
    pub max_in_flight: usize,
    /// Queue length (at least 1, at most 2⁶¹ − 1); callers finding it full
    /// are shed ([`Source::Shed`](super::Source::Shed)).
    pub queue: usize,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            max_batch: 256,
            max_in_flight: 2,
            queue: 16_384,
        }
    }
}

/// The longest queue and the most calls in flight tokio's channel and
/// semaphore can count.
pub(crate) const MAX_QUEUE: usize = Semaphore::MAX_PERMITS;

type Reply = oneshot::Sender<Result<Decision, RedisLimitError>>;

struct Job {
    key: String,
    cost: u32,
    deadline: Instant,
    /// Its back-off cell, and when it was asked (ns since the core's epoch).
    cell: usize,
    asked: u64,
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

    /// Queue one decision (for back-off `cell`, asked at `asked` ns) and
    /// wait for it; answered by `deadline` (see the module documentation).
    /// A full queue sheds the caller at once.
    pub(crate) async fn submit(
        &self,
        key: String,
        cost: u32,
        deadline: Instant,
        cell: usize,
        asked: u64,
    ) -> Result<Decision, RedisLimitError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Job {
                key,
                cost,
                deadline,
                cell,
                asked,
                reply,
            })
            .map_err(|_| RedisLimitError::Overloaded)?;
        // A job's sender is dropped unanswered only when the batching task
        // or a call's task is gone (the runtime shutting down).
        rx.await.unwrap_or(Err(RedisLimitError::Overloaded))
    }
}

async fn run(core: Arc<Core>, mut rx: mpsc::Receiver<Job>, cfg: Batching) {
    let slots = Arc::new(Semaphore::new(cfg.max_in_flight));
    let mut jobs: Vec<Job> = Vec::with_capacity(cfg.max_batch.min(1024));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut jobs, cfg.max_batch).await == 0 {
            return; // every sender is gone
        }
        if !core.cluster {
            let batch = std::mem::replace(&mut jobs, Vec::with_capacity(cfg.max_batch.min(1024)));
            spawn_call(&core, batch, permit);
            continue;
        }
        let mut groups: HashMap<u16, Vec<Job>> = HashMap::new();
        for job in jobs.drain(..) {
            groups
                .entry(super::cluster_slot(&job.key))
                .or_default()
                .push(job);
        }
        let mut groups: Vec<Vec<Job>> = groups.into_values().collect();
        groups.sort_by_key(|g| earliest(g));
        let mut permit = Some(permit);
        for mut batch in groups {
            let p = match permit.take() {
                Some(p) => p,
                None => match slot_for(&slots, &mut batch, &core).await {
                    Some(p) => p,
                    None => continue, // every job of the group was late
                },
            };
            spawn_call(&core, batch, p);
        }
    }
}

fn spawn_call(core: &Arc<Core>, batch: Vec<Job>, permit: OwnedSemaphorePermit) {
    let core = core.clone();
    tokio::spawn(async move {
        decide(&core, batch).await;
        drop(permit);
    });
}

/// The earliest deadline of a non-empty group (`Instant::now()` for an
/// empty one, which sorts it first and costs nothing).
fn earliest(batch: &[Job]) -> Instant {
    batch
        .iter()
        .map(|j| j.deadline)
        .min()
        .unwrap_or_else(Instant::now)
}

/// Answer the jobs of `batch` whose deadline is not after `now`, or within
/// half a timeout of it when their cell saw a call fail since they were
/// asked, never sent, keeping the others (see [`Core::late`] for their
/// error).
fn answer_late(batch: &mut Vec<Job>, now: Instant, core: &Core) {
    let slow = now.checked_add(core.slow()).unwrap_or(now);
    let (live, late): (Vec<Job>, Vec<Job>) = std::mem::take(batch).into_iter().partition(|job| {
        job.deadline > now && (job.deadline >= slow || !core.failed_since(job.cell, job.asked))
    });
    for job in late {
        let _ = job.reply.send(Err(core.late(job.cell, job.asked)));
    }
    *batch = live;
}

/// Wait for a call slot for `batch`, answering its jobs as their
/// deadlines pass; `None` once none is left (or the slots are closed).
async fn slot_for(
    slots: &Arc<Semaphore>,
    batch: &mut Vec<Job>,
    core: &Core,
) -> Option<OwnedSemaphorePermit> {
    while !batch.is_empty() {
        let until = tokio::time::Instant::from_std(earliest(batch));
        match tokio::time::timeout_at(until, slots.clone().acquire_owned()).await {
            Ok(permit) => return permit.ok(),
            Err(_) => answer_late(batch, Instant::now(), core),
        }
    }
    None
}

async fn decide(core: &Core, mut batch: Vec<Job>) {
    let sent = Instant::now();
    answer_late(&mut batch, sent, core);
    // One cell for the whole call: one server, or one Cluster slot.
    let Some(cell) = batch.first().map(|j| j.cell) else {
        return;
    };
    // The scripts decide a repeated key from one read of its state, which
    // needs its decisions adjacent; a stable sort keeps them in arrival
    // order.
    batch.sort_by(|a, b| a.key.cmp(&b.key));
    let n = batch.len();
    let (mut names, mut costs, mut deadlines, mut asked, mut replies) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for job in batch {
        names.push(job.key);
        costs.push(job.cost);
        deadlines.push(job.deadline);
        asked.push(job.asked);
        replies.push(Some(job.reply));
    }
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut by_deadline: Vec<usize> = (0..n).collect();
    by_deadline.sort_by_key(|&i| deadlines[i]);
    let call = core.query(&keys, &costs);
    tokio::pin!(call);
    // Index into `by_deadline` of the first caller still waiting.
    let mut next = 0;
    loop {
        let until = tokio::time::Instant::from_std(deadlines[by_deadline[next]]);
        tokio::select! {
            biased;
            result = &mut call => {
                match result {
                    Ok(decisions) => {
                        for (reply, decision) in replies.into_iter().zip(decisions) {
                            if let Some(reply) = reply {
                                let _ = reply.send(Ok(decision));
                            }
                        }
                    }
                    Err(e) => {
                        core.failed_at(cell, Instant::now());
                        for reply in replies.into_iter().flatten() {
                            let _ = reply.send(Err(e.clone()));
                        }
                    }
                }
                return;
            }
            () = tokio::time::sleep_until(until) => {
                let now = Instant::now();
                // Unanswered for half a timeout: Redis is slow. A caller
                // whose deadline comes sooner than that after the call went
                // out spent its time in the queue instead.
                if now.saturating_duration_since(sent) >= core.slow() {
                    core.failed_at(cell, now);
                }
                while next < by_deadline.len() && deadlines[by_deadline[next]] <= now {
                    let i = by_deadline[next];
                    if let Some(reply) = replies[i].take() {
                        let _ = reply.send(Err(core.late(cell, asked[i])));
                    }
                    next += 1;
                }
                if next == by_deadline.len() {
                    return; // everyone has been answered: drop the call
                }
            }
        }
    }
}
