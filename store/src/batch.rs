//! Batching concurrent callers' decisions into shared store calls.
//!
//! Callers put `(key, cost, deadline, reply)` on a bounded queue (the key
//! as the store names it). One task waits for a free in-flight slot, then
//! drains whatever is queued (up to `max_batch`), groups it by each key's
//! [`group`](crate::Placement::group) (a Redis script may only
//! touch keys of one Cluster slot; a Memcached pipeline goes to one
//! server), and spawns one call per group. While all slots are busy the
//! queue fills, so batches grow exactly when the store is the bottleneck,
//! and a lone caller pays no batching delay.
//!
//! # Deadlines
//!
//! Every caller is answered by its own deadline, yet there is one timer
//! per store call, not one per caller (a timer per decision was a
//! measurable share of the client's time per decision at high rates):
//!
//! * a call waits for the store alongside a single sleep set to the earliest
//!   deadline among its callers still waiting; when it fires, those past
//!   their deadline get [`StoreError::Timeout`] and the sleep moves
//!   to the next deadline, so a caller close to its deadline never cuts
//!   short the others in its batch;
//! * callers already late when their batch is cut are answered without
//!   being sent, and a group waiting for a slot (Cluster) answers its late
//!   callers while it waits;
//! * so are callers that waited in the queue while a call for their cell
//!   (server, or range of Cluster slots) failed or was slow, unless at least half a timeout
//!   (what "slow" means) is left to them: they get that failure at once.
//!   Otherwise a stalled server would be sent, group by group as calls are
//!   given up at their callers' deadlines, a stream of calls each sent
//!   with moments to spare and given up at once (which it would still run,
//!   and charge, when it wakes). Callers asked after the failure meet the
//!   back-off before they are queued;
//! * a queued caller waits behind calls holding older callers only (the
//!   queue is drained in order, a drain's groups go out by earliest
//!   deadline), and each such call ends by its latest deadline, no later
//!   than the queued caller's own.
//!
//! A call a caller gave up on may still run on the store and count its
//! units, as with any timeout on a request already sent.

use crate::backend::{Backend, Placement};
use crate::caller::Caller;
use crate::error::StoreError;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use weir_rate::Decision;

/// Settings for the batching path ([`StoreLimiterBuilder::batching`](crate::StoreLimiterBuilder::batching)).
///
/// ```
/// use weir_store::Batching;
///
/// // Up to 64 decisions a call, 4 calls in flight, 4096 callers queued.
/// let batching = Batching { max_batch: 64, max_in_flight: 4, queue: 4096 };
/// assert_eq!(Batching::default().max_in_flight, 2);
/// # let _ = batching;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Most decisions in one store call (at least 1; any larger value
    /// is bounded by the queue in practice).
    pub max_batch: usize,
    /// Most store calls in flight at once (per limiter; at least 1, at
    /// most 2⁶¹ − 1).
    pub max_in_flight: usize,
    /// Queue length (at least 1, at most 2⁶¹ − 1); callers finding it full
    /// are shed ([`Source::Shed`](crate::Source::Shed)).
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

type Reply = oneshot::Sender<Result<Decision, StoreError>>;

struct Job<K> {
    key: K,
    cost: u32,
    deadline: Instant,
    /// Its back-off cell and batching group, and when it was asked (ns
    /// since the health's epoch).
    cell: usize,
    group: u64,
    asked: u64,
    reply: Reply,
}

/// The caller's side: the queue into the batching task. Dropping it ends
/// the task once the queue is drained.
pub(crate) struct Batcher<K> {
    tx: mpsc::Sender<Job<K>>,
}

impl<K: Clone + Ord + Send + Sync + 'static> Batcher<K> {
    /// Spawn the batching task on the current tokio runtime.
    pub(crate) fn start<B: Backend<Key = K>>(caller: Arc<Caller<B>>, cfg: Batching) -> Self {
        let (tx, rx) = mpsc::channel(cfg.queue);
        tokio::spawn(run(caller, rx, cfg));
        Self { tx }
    }

    /// Queue one decision of the key `placed` (asked at `asked` ns) and
    /// wait for it; answered by `deadline` (see the module documentation).
    /// A full queue sheds the caller at once.
    pub(crate) async fn submit(
        &self,
        placed: Placement<K>,
        cost: u32,
        deadline: Instant,
        asked: u64,
    ) -> Result<Decision, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Job {
                key: placed.key,
                cost,
                deadline,
                cell: placed.cell,
                group: placed.group,
                asked,
                reply,
            })
            .map_err(|_| StoreError::Overloaded)?;
        // A job's sender is dropped unanswered only when the batching task
        // or a call's task is gone (the runtime shutting down).
        rx.await.unwrap_or(Err(StoreError::Overloaded))
    }
}

async fn run<B: Backend>(
    caller: Arc<Caller<B>>,
    mut rx: mpsc::Receiver<Job<B::Key>>,
    cfg: Batching,
) {
    let slots = Arc::new(Semaphore::new(cfg.max_in_flight));
    let mut jobs: Vec<Job<B::Key>> = Vec::with_capacity(cfg.max_batch.min(1024));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut jobs, cfg.max_batch).await == 0 {
            return; // every sender is gone
        }
        let first = jobs[0].group;
        if jobs.iter().all(|job| job.group == first) {
            let batch = std::mem::replace(&mut jobs, Vec::with_capacity(cfg.max_batch.min(1024)));
            spawn_call(&caller, batch, permit);
            continue;
        }
        let mut groups: HashMap<u64, Vec<Job<B::Key>>> = HashMap::new();
        for job in jobs.drain(..) {
            groups.entry(job.group).or_default().push(job);
        }
        let mut groups: Vec<Vec<Job<B::Key>>> = groups.into_values().collect();
        groups.sort_by_key(|g| earliest(g));
        let mut permit = Some(permit);
        for mut batch in groups {
            let p = match permit.take() {
                Some(p) => p,
                None => match slot_for(&slots, &mut batch, &caller).await {
                    Some(p) => p,
                    None => continue, // every job of the group was late
                },
            };
            spawn_call(&caller, batch, p);
        }
    }
}

fn spawn_call<B: Backend>(
    caller: &Arc<Caller<B>>,
    batch: Vec<Job<B::Key>>,
    permit: OwnedSemaphorePermit,
) {
    let caller = caller.clone();
    tokio::spawn(async move {
        decide(&caller, batch).await;
        drop(permit);
    });
}

/// The earliest deadline of a non-empty group (`Instant::now()` for an
/// empty one, which sorts it first and costs nothing).
fn earliest<K>(batch: &[Job<K>]) -> Instant {
    batch
        .iter()
        .map(|j| j.deadline)
        .min()
        .unwrap_or_else(Instant::now)
}

/// Answer the jobs of `batch` whose deadline is not after `now`, or within
/// half a timeout of it when their cell saw a call fail since they were
/// asked, never sent, keeping the others (see [`Caller::late`] for their
/// error).
fn answer_late<B: Backend>(batch: &mut Vec<Job<B::Key>>, now: Instant, caller: &Caller<B>) {
    let slow = now.checked_add(caller.slow()).unwrap_or(now);
    let (live, late): (Vec<_>, Vec<_>) = std::mem::take(batch).into_iter().partition(|job| {
        job.deadline > now
            && (job.deadline >= slow || !caller.health.failed_since(job.cell, job.asked))
    });
    for job in late {
        let _ = job.reply.send(Err(caller.late(job.cell, job.asked)));
    }
    *batch = live;
}

/// Wait for a call slot for `batch`, answering its jobs as their
/// deadlines pass; `None` once none is left (or the slots are closed).
async fn slot_for<B: Backend>(
    slots: &Arc<Semaphore>,
    batch: &mut Vec<Job<B::Key>>,
    caller: &Caller<B>,
) -> Option<OwnedSemaphorePermit> {
    while !batch.is_empty() {
        let until = earliest(batch);
        match tokio::time::timeout_at(until, slots.clone().acquire_owned()).await {
            Ok(permit) => return permit.ok(),
            Err(_) => answer_late(batch, Instant::now(), caller),
        }
    }
    None
}

async fn decide<B: Backend>(caller: &Caller<B>, mut batch: Vec<Job<B::Key>>) {
    let sent = Instant::now();
    answer_late(&mut batch, sent, caller);
    // One cell for the whole call: one group is one server, or one
    // Cluster slot.
    let Some(cell) = batch.first().map(|j| j.cell) else {
        return;
    };
    // A store decides a repeated key from one read of its state, which
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
    let mut by_deadline: Vec<usize> = (0..n).collect();
    by_deadline.sort_by_key(|&i| deadlines[i]);
    let call = caller.backend.decide(&names, &costs);
    tokio::pin!(call);
    // Index into `by_deadline` of the first caller still waiting.
    let mut next = 0;
    loop {
        let until = deadlines[by_deadline[next]];
        tokio::select! {
            biased;
            result = &mut call => {
                match result {
                    Ok(decisions) => {
                        for (reply, decision) in replies.into_iter().zip(decisions) {
                            if let Some(reply) = reply {
                                let _ = reply.send(decision);
                            }
                        }
                    }
                    Err(e) => {
                        caller.health.failed_at(cell, Instant::now());
                        for reply in replies.into_iter().flatten() {
                            let _ = reply.send(Err(e.clone()));
                        }
                    }
                }
                return;
            }
            () = tokio::time::sleep_until(until) => {
                let now = Instant::now();
                // Unanswered for half a timeout: the store is slow. A caller
                // whose deadline comes sooner than that after the call went
                // out spent its time in the queue instead.
                if now.saturating_duration_since(sent) >= caller.slow() {
                    caller.health.failed_at(cell, now);
                }
                while next < by_deadline.len() && deadlines[by_deadline[next]] <= now {
                    let i = by_deadline[next];
                    if let Some(reply) = replies[i].take() {
                        let _ = reply.send(Err(caller.late(cell, asked[i])));
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
