//! Fixed and sliding windows on Memcached's atomic counters: one counter
//! per key and window (fixed) or sub-window (sliding), named by the
//! window's number on the Unix epoch's grid, so every instance and the
//! in-process fallback count the same windows.
//!
//! A check is one pipeline to the key's server: increment the current
//! counter by the cost (created with its TTL if it is not there, memcached
//! 1.6's `ma` with `N`), and for a sliding window read the older counters
//! in the same round trip. The decision is weir-rate's own on a state
//! rebuilt from those counts, the increment's result standing for the
//! current count with this request in it. Increments are atomic, so two
//! instances can never both take the last unit: each sees its own
//! increment's result. A request so refused gives its increment back
//! (a decrement, which its answer waits for, so that the caller's next
//! request is decided without it); until it lands, a concurrent check may
//! be refused for it, never allowed. A refusal therefore takes two round
//! trips, and a batch of keys with a refusal in it waits for the second.
//!
//! # Several windows all-or-nothing
//!
//! Memcached has no transaction, but a set of windows needs none to be
//! never looser than exact: the check increments the current counter of
//! every limit in the one pipeline, and if any limit refuses, gives every
//! increment back. A unit counted by every limit's increment is one that
//! every limit saw with its own increment's result, so each limit holds
//! on its own, and a request allowed by all of them spent from all of
//! them. The cost is refusals, never admissions: between a refused
//! request's increments and their return, a concurrent check of the key
//! counts them, and a limit that then looks full refuses a request the
//! exact all-of would have let through. Those refusals need a refusal by
//! another limit of the same key in the same round trip's time, so they
//! come with a key already at one of its limits.
//!
//! The counters of one key all live on the server of its first limit's
//! name (the router places a key by what comes before its `|`), so the
//! set is one pipeline to one server.

use crate::connection::{Connection, store_error, ttl};
use memcache::exp::{Arithmetic, Get, Op, OpResult};
use weir_rate::{Algorithm, Decision, FixedWindow, Mode, Quota, Receipt, SlidingWindow};
use weir_store::StoreError;

/// A window algorithm and the counters it keeps.
pub(crate) enum Window {
    Fixed(FixedWindow),
    Sliding(SlidingWindow),
}

impl Window {
    pub(crate) fn fixed(quota: Quota) -> Self {
        Self::Fixed(FixedWindow::new(quota))
    }

    pub(crate) fn sliding(sliding: SlidingWindow) -> Self {
        Self::Sliding(sliding)
    }

    /// The length of the time one counter counts (ns, at least 1).
    fn slot(&self) -> u64 {
        let d = match self {
            Self::Fixed(f) => f.quota().window(),
            Self::Sliding(s) => s.sub_window(),
        };
        weir_primitives::time::duration_to_nanos(d).max(1)
    }

    /// How many counters count at once: the current and, for a sliding
    /// window, the `N − 1` before it.
    fn kept(&self) -> u64 {
        match self {
            Self::Fixed(_) => 1,
            Self::Sliding(s) => u64::from(s.counters()),
        }
    }
}

/// The windows of one limiter, checked all-or-nothing (most often one),
/// each with the mark that sets its counters apart from the others'.
pub(crate) struct Windows {
    limits: Vec<(String, Window)>,
}

impl Windows {
    /// `limits` in their order, each with its mark: empty for the first,
    /// and for every other a text no other limit of the set has and that
    /// ends before the slot's number (see [`counter`]).
    pub(crate) fn new(limits: Vec<(String, Window)>) -> Self {
        Self { limits }
    }
}

/// `key`'s counter of slot number `slot`, for the limit of `mark`.
fn counter(key: &str, mark: &str, slot: u64) -> String {
    format!("{key}|{mark}{slot}")
}

/// The increment of `cost` on `key`'s counter of `slot`, creating it with
/// the TTL that outlasts the time it counts.
fn increment(key: &str, mark: &str, slot: u64, cost: u32, now: u64, window: &Window) -> Arithmetic {
    let until = slot
        .saturating_add(window.kept())
        .saturating_mul(window.slot());
    Arithmetic::new(counter(key, mark, slot))
        .delta(u64::from(cost))
        .initial(u64::from(cost), ttl(now, until))
}

/// The decrement that gives back `cost` of `key`'s counter of `slot`.
fn decrement(key: &str, mark: &str, slot: u64, cost: u32) -> Op {
    Op::from(
        Arithmetic::new(counter(key, mark, slot))
            .decrement()
            .delta(u64::from(cost)),
    )
}

/// A counter's value as read, trimmed (a decremented counter keeps its
/// width, padded with spaces); a miss is zero.
fn count(read: Option<&OpResult>) -> Result<u64, StoreError> {
    let Some(OpResult::Get(get)) = read else {
        return Err(StoreError::BadReply("expected a get's result".to_owned()));
    };
    if !get.hit() {
        return Ok(0);
    }
    let value = get.value.as_deref().unwrap_or_default();
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| StoreError::BadReply(format!("a counter holds {value:?}")))
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// What the store counts for one limit of one key: `older[j]` the count
/// of the slot `j + 1` back, `current` the current slot's count before
/// this request.
struct Counts {
    slot: u64,
    older: Vec<u64>,
    current: u64,
}

/// The decision in `mode` on a state rebuilt from the counts.
fn judge(window: &Window, now: u64, counts: &Counts, cost: u32, mode: Mode) -> Decision {
    let Counts {
        slot,
        ref older,
        current,
    } = *counts;
    let len = window.slot();
    let start = |back: u64| slot.saturating_sub(back).saturating_mul(len);
    let decided = match window {
        Window::Fixed(fixed) => {
            let mut state = fixed.new_state(start(0));
            fixed.charge(&mut state, start(0), clamp(current));
            fixed.check(&mut state, now, cost, mode)
        }
        Window::Sliding(sliding) => {
            let oldest = older.len() as u64;
            let mut state = sliding.new_state(start(oldest));
            for (back, &n) in (1..=oldest).rev().zip(older.iter().rev()) {
                sliding.charge(&mut state, start(back), clamp(n));
            }
            sliding.charge(&mut state, start(0), clamp(current));
            sliding.check(&mut state, now, cost, mode)
        }
    };
    // A cost within the limit was checked before the call: never refused
    // as impossible here; deny rather than panic if it were.
    let decision = decided.unwrap_or_else(|_| {
        let second = std::time::Duration::from_secs(1);
        Decision::deny(0, second, 0, second, second)
    });
    match decision.receipt() {
        Some(_) => decision.with_receipt(Receipt::remote(now, cost)),
        None => decision,
    }
}

/// The set's decision on `counts` (one per limit, in order), as the
/// in-process [`AllOf`](weir_rate::AllOf) decides: a refusal by any limit
/// spends nothing, and the limits that would have allowed tell what they
/// have left.
fn all_of(windows: &Windows, now: u64, counts: &[Counts], cost: u32) -> Decision {
    let each = |mode: Mode, unspent: bool| {
        let mut combined: Option<Decision> = None;
        for ((_, window), counts) in windows.limits.iter().zip(counts) {
            let mut d = judge(window, now, counts, cost, mode);
            if unspent && d.is_allowed() {
                d = judge(window, now, counts, 0, Mode::Peek);
            }
            combined = Some(match combined {
                Some(c) => c.combine(d),
                None => d,
            });
        }
        combined.expect("a set of at least one window")
    };
    if let [(_, window)] = windows.limits.as_slice() {
        return judge(window, now, &counts[0], cost, Mode::Consume);
    }
    let spent = each(Mode::Consume, false);
    if spent.is_allowed() {
        return spent;
    }
    each(Mode::Peek, true)
}

/// The next result of a pipeline, or why there is none.
fn next(
    results: &mut impl Iterator<Item = Result<OpResult, memcache::exp::Error>>,
) -> Result<OpResult, StoreError> {
    match results.next() {
        Some(Ok(result)) => Ok(result),
        Some(Err(e)) => Err(store_error(e)),
        None => Err(StoreError::BadReply("a reply missing".to_owned())),
    }
}

pub(crate) async fn decide(
    connection: &Connection,
    windows: &Windows,
    keys: &[String],
    costs: &[u32],
) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
    let now = connection.now();
    let per_key: u64 = windows.limits.iter().map(|(_, w)| w.kept()).sum();
    let mut ops: Vec<Op> = Vec::with_capacity(keys.len() * per_key as usize);
    for (key, &cost) in keys.iter().zip(costs) {
        for (mark, window) in &windows.limits {
            let slot = now / window.slot();
            ops.push(increment(key, mark, slot, cost, now, window).into());
            for back in 1..window.kept() {
                ops.push(Get::new(counter(key, mark, slot.saturating_sub(back))).into());
            }
        }
    }
    let results = connection
        .client()
        .run_batch(ops)
        .await
        .map_err(store_error)?;
    let mut results = results.into_iter();
    let mut decisions = Vec::with_capacity(keys.len());
    let mut give_back = Vec::new();
    for (key, &cost) in keys.iter().zip(costs) {
        let mut counts = Vec::with_capacity(windows.limits.len());
        for (_, window) in &windows.limits {
            let OpResult::Arithmetic(incremented) = next(&mut results)? else {
                return Err(StoreError::BadReply(
                    "expected an increment's result".to_owned(),
                ));
            };
            let Some(after) = incremented.value else {
                return Err(StoreError::BadReply(
                    "an increment without its value".to_owned(),
                ));
            };
            let mut older = Vec::with_capacity(window.kept() as usize - 1);
            for _ in 1..window.kept() {
                older.push(count(Some(&next(&mut results)?))?);
            }
            counts.push(Counts {
                slot: now / window.slot(),
                older,
                current: after.saturating_sub(u64::from(cost)),
            });
        }
        let decision = all_of(windows, now, &counts, cost);
        if !decision.is_allowed() && cost > 0 {
            for ((mark, _), counts) in windows.limits.iter().zip(&counts) {
                give_back.push(decrement(key, mark, counts.slot, cost));
            }
        }
        decisions.push(Ok(decision));
    }
    if !give_back.is_empty() {
        // Refused requests take back their increments before they are
        // answered, so that a caller's next request is decided on counts
        // without them. A lost decrement (an error, the call dropped) only
        // leaves a count higher: stricter, never looser.
        let _ = connection.client().run_batch(give_back).await;
    }
    Ok(decisions)
}

/// `ops` in one pipeline, each of which must succeed.
async fn run_all(
    connection: &Connection,
    ops: impl IntoIterator<Item = Op>,
) -> Result<(), StoreError> {
    let results = connection
        .client()
        .run_batch(ops)
        .await
        .map_err(store_error)?;
    for result in results {
        result.map_err(store_error)?;
    }
    Ok(())
}

/// Every limit's current counter increased by `cost`, in one pipeline.
pub(crate) async fn charge(
    connection: &Connection,
    windows: &Windows,
    key: &str,
    cost: u32,
) -> Result<Receipt, StoreError> {
    let now = connection.now();
    let ops = windows.limits.iter().map(|(mark, window)| {
        Op::from(increment(key, mark, now / window.slot(), cost, now, window))
    });
    run_all(connection, ops).await?;
    Ok(Receipt::remote(now, cost))
}

/// A refund takes its units out of each counter they were charged to
/// while that counter still counts, and returns nothing after (as in
/// process).
pub(crate) async fn refund(
    connection: &Connection,
    windows: &Windows,
    key: &str,
    receipt: Receipt,
) -> Result<(), StoreError> {
    let now = connection.now();
    let mut ops = Vec::new();
    for (mark, window) in &windows.limits {
        let len = window.slot();
        let (slot, charged) = (now / len, receipt.at_nanos() / len);
        if charged <= slot && slot - charged < window.kept() && receipt.cost() > 0 {
            ops.push(decrement(key, mark, charged, receipt.cost()));
        }
    }
    if ops.is_empty() {
        return Ok(());
    }
    // A counter that has expired or was evicted has nothing to give back.
    run_all(connection, ops).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;
    use std::time::Duration;
    use weir_rate::RateLimiter;
    use weir_rate::clock::ManualClock;

    /// The decision rebuilt from counts is the in-process limiter's on the
    /// same requests at the same times.
    fn agrees<L: Algorithm>(window: Window, algorithm: L) {
        let second = 1_000_000_000u64;
        let start = 1_800_000_000 * second;
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(start));
        let reference = RateLimiter::with_clock(algorithm, clock.clone());
        // The counts per slot, as the store would hold them.
        let mut slots: std::collections::HashMap<u64, u64> = Default::default();
        let len = window.slot();
        for step in 0..300u64 {
            let now = start + step * 37_000_000;
            clock.set(Duration::from_nanos(now));
            let cost = 1 + (step % 3) as u32;
            let expected = reference.check_n(cost).unwrap();
            let slot = now / len;
            let older: Vec<u64> = (1..window.kept())
                .map(|back| *slots.get(&(slot - back)).unwrap_or(&0))
                .collect();
            let current = *slots.get(&slot).unwrap_or(&0);
            let counts = Counts {
                slot,
                older,
                current,
            };
            let got = judge(&window, now, &counts, cost, Mode::Consume);
            let summary = |d: &Decision| {
                (
                    d.is_allowed(),
                    d.remaining(),
                    d.reset_after(),
                    d.retry_after(),
                )
            };
            assert_eq!(summary(&got), summary(&expected), "step {step}");
            if got.is_allowed() {
                assert!(got.receipt().is_some_and(Receipt::is_remote));
                *slots.entry(slot).or_default() += u64::from(cost);
            }
        }
    }

    #[test]
    fn decisions_from_counts_are_the_in_process_ones() {
        let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
        agrees(Window::fixed(quota), FixedWindow::new(quota));
        for n in [2, 5] {
            let sliding = SlidingWindow::try_new(quota, n).unwrap();
            agrees(Window::sliding(sliding.clone()), sliding);
        }
    }
}
