//! GCRA and the token bucket by compare-and-swap: Memcached has no
//! transaction, so a decision reads a key's state with its CAS value,
//! decides, and writes the new state only if nobody wrote it in between
//! (memcached 1.6's `mg` with `c`, then `ms` with `C`; a key never seen
//! is created with an `add` that fails if another writer created it
//! first). A write that loses is decided again from a fresh read, up to
//! [`Servers::cas_attempts`](crate::Servers::cas_attempts) times; a decision
//! that runs out is refused with [`StoreError::Contended`]. Every allowed
//! unit was therefore written by a successful swap on the state it was
//! decided on: contention costs round trips and refusals, never extra
//! admissions.
//!
//! The state kept is one time per key: when the key turns idle
//! ([`Forgettable::idle_at`]). For GCRA that is its theoretical arrival time,
//! for a token bucket the time it would be full again, and both are
//! rebuilt from it exactly ([`Forgettable::spent_until`]), so the decision is
//! weir-rate's own. A batch of keys takes two round trips per attempt: one
//! pipeline of reads, one of writes.

use crate::connection::{Connection, LAST_KEPT_NS, store_error, ttl};
use memcache::exp::{Get, Meta, MutationStatus, Op, OpResult, Set};
use std::sync::atomic::Ordering;
use weir_rate::{Decision, Forgettable, Gcra, Mode, Receipt, TokenBucket};
use weir_store::StoreError;

/// An algorithm kept as one time per key.
pub(crate) enum CasLimit {
    Gcra(Gcra),
    Bucket(TokenBucket),
}

/// A key's stored time and the CAS value it was read with (`None`: the
/// key is not there).
type Read = Option<(u64, u64)>;

/// One pipeline of reads of `keys`.
async fn read(connection: &Connection, keys: &[&str]) -> Result<Vec<Read>, StoreError> {
    let ops = keys
        .iter()
        .map(|key| Op::from(Get::new(key).meta(Meta::NONE.cas())));
    let results = connection
        .client()
        .run_batch(ops)
        .await
        .map_err(store_error)?;
    results
        .into_iter()
        .map(|result| match result.map_err(store_error)? {
            OpResult::Get(get) if !get.hit() => Ok(None),
            OpResult::Get(get) => {
                let value = get.value.as_deref().unwrap_or_default();
                let time = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| StoreError::BadReply(format!("a state holds {value:?}")))?;
                let cas = get
                    .item
                    .cas
                    .ok_or_else(|| StoreError::BadReply("a read without its CAS".to_owned()))?;
                Ok(Some((time, cas)))
            }
            _ => Err(StoreError::BadReply("expected a get's result".to_owned())),
        })
        .collect()
}

/// The write of `idle_at` over what `read` found: compared with its CAS,
/// or added if the key was not there. A debt beyond the latest expiry
/// memcached keeps is kept up to it ([`LAST_KEPT_NS`]): written whole, its
/// item would be dropped at the next read and the key start afresh.
fn write(key: &str, read: Read, idle_at: u64, now: u64) -> Op {
    let idle_at = idle_at.min(LAST_KEPT_NS);
    let set = Set::new(key, idle_at.to_string()).ttl_raw(ttl(now, idle_at));
    Op::from(match read {
        Some((_, cas)) => set.compare_cas(cas),
        None => set.add(),
    })
}

/// One pipeline of writes; which of them took.
async fn swap(connection: &Connection, writes: Vec<Op>) -> Result<Vec<bool>, StoreError> {
    let n = writes.len() as u64;
    let results = connection
        .client()
        .run_batch(writes)
        .await
        .map_err(store_error)?;
    let took: Vec<bool> = results
        .into_iter()
        .map(|result| match result.map_err(store_error)? {
            OpResult::Mutation(m) => Ok(m.status == MutationStatus::Applied),
            _ => Err(StoreError::BadReply("expected a set's result".to_owned())),
        })
        .collect::<Result<_, StoreError>>()?;
    connection.stats.writes.fetch_add(n, Ordering::Relaxed);
    let lost = took.iter().filter(|&&t| !t).count() as u64;
    connection.stats.lost.fetch_add(lost, Ordering::Relaxed);
    Ok(took)
}

/// The state a read stands for at `now`.
fn state_of<L: Forgettable>(limiter: &L, read: Read, now: u64) -> L::State {
    match read {
        Some((idle_at, _)) => limiter.spent_until(idle_at, now),
        None => limiter.new_state(now),
    }
}

pub(crate) async fn decide(
    connection: &Connection,
    limit: &CasLimit,
    keys: &[String],
    costs: &[u32],
) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
    match limit {
        CasLimit::Gcra(gcra) => decide_with(connection, gcra, keys, costs).await,
        CasLimit::Bucket(bucket) => decide_with(connection, bucket, keys, costs).await,
    }
}

async fn decide_with<L: Forgettable>(
    connection: &Connection,
    limiter: &L,
    keys: &[String],
    costs: &[u32],
) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
    // The requests of each key, in order (equal keys arrive adjacent).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match runs.last_mut() {
            Some((start, end)) if keys[*start] == *key => *end = i + 1,
            _ => runs.push((i, i + 1)),
        }
    }
    let mut decisions: Vec<Option<Result<Decision, StoreError>>> = vec![None; keys.len()];
    let mut pending: Vec<usize> = (0..runs.len()).collect();
    let mut attempts = 0;
    while !pending.is_empty() && attempts < connection.cas_attempts {
        attempts += 1;
        let names: Vec<&str> = pending.iter().map(|&r| keys[runs[r].0].as_str()).collect();
        let reads = read(connection, &names).await?;
        let now = connection.now();
        let mut writes = Vec::new();
        let mut writing = Vec::new();
        for (&run, read) in pending.iter().zip(reads) {
            let (start, end) = runs[run];
            let mut state = state_of(limiter, read, now);
            let mut spent = false;
            for i in start..end {
                let decision = limiter
                    .check(&mut state, now, costs[i], Mode::Consume)
                    .map(|d| match d.receipt() {
                        Some(r) => {
                            spent = true;
                            d.with_receipt(Receipt::remote(r.at_nanos(), r.cost()))
                        }
                        None => d,
                    })
                    .map_err(StoreError::NeverAllowed);
                decisions[i] = Some(decision);
            }
            if spent {
                let idle_at = limiter.idle_at(&state, now);
                writes.push(write(&keys[start], read, idle_at, now));
                writing.push(run);
            }
        }
        let took = swap(connection, writes).await?;
        pending = writing
            .into_iter()
            .zip(took)
            .filter_map(|(run, took)| (!took).then_some(run))
            .collect();
    }
    for run in pending {
        for decision in &mut decisions[runs[run].0..runs[run].1] {
            *decision = Some(Err(StoreError::Contended { attempts }));
        }
    }
    Ok(decisions
        .into_iter()
        .map(|d| d.unwrap_or_else(|| Err(StoreError::BadReply("undecided".to_owned()))))
        .collect())
}

/// A read-change-swap loop on one key: `change` returns what to answer
/// and whether the state must be written.
async fn update<L: Forgettable, T>(
    connection: &Connection,
    limiter: &L,
    key: &str,
    mut change: impl FnMut(&mut L::State, u64, bool) -> (T, bool),
) -> Result<T, StoreError> {
    for _ in 0..connection.cas_attempts {
        let read = read(connection, &[key]).await?.pop().flatten();
        let now = connection.now();
        let mut state = state_of(limiter, read, now);
        let (answer, changed) = change(&mut state, now, read.is_some());
        if !changed {
            return Ok(answer);
        }
        let idle_at = limiter.idle_at(&state, now);
        if swap(connection, vec![write(key, read, idle_at, now)]).await?[0] {
            return Ok(answer);
        }
    }
    Err(StoreError::Contended {
        attempts: connection.cas_attempts,
    })
}

pub(crate) async fn charge(
    connection: &Connection,
    limit: &CasLimit,
    key: &str,
    cost: u32,
) -> Result<Receipt, StoreError> {
    async fn with<L: Forgettable>(
        connection: &Connection,
        limiter: &L,
        key: &str,
        cost: u32,
    ) -> Result<Receipt, StoreError> {
        update(connection, limiter, key, |state, now, _| {
            let r = limiter.charge(state, now, cost);
            (Receipt::remote(r.at_nanos(), r.cost()), cost > 0)
        })
        .await
    }
    match limit {
        CasLimit::Gcra(gcra) => with(connection, gcra, key, cost).await,
        CasLimit::Bucket(bucket) => with(connection, bucket, key, cost).await,
    }
}

/// A refund of a key not there (idle, expired or evicted) has nothing to
/// give back.
pub(crate) async fn refund(
    connection: &Connection,
    limit: &CasLimit,
    key: &str,
    receipt: Receipt,
) -> Result<(), StoreError> {
    async fn with<L: Forgettable>(
        connection: &Connection,
        limiter: &L,
        key: &str,
        receipt: Receipt,
    ) -> Result<(), StoreError> {
        update(connection, limiter, key, |state, now, present| {
            if present {
                limiter.refund(state, now, receipt);
            }
            ((), present)
        })
        .await
    }
    match limit {
        CasLimit::Gcra(gcra) => with(connection, gcra, key, receipt).await,
        CasLimit::Bucket(bucket) => with(connection, bucket, key, receipt).await,
    }
}
