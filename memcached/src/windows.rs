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
//! (decrement, sent without waiting); until it lands, a concurrent check
//! may be refused for it, never allowed.

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

/// `key`'s counter of slot number `slot`.
fn counter(key: &str, slot: u64) -> String {
    format!("{key}|{slot}")
}

/// The increment of `cost` on `key`'s counter of `slot`, creating it with
/// the TTL that outlasts the time it counts.
fn increment(key: &str, slot: u64, cost: u32, now: u64, window: &Window) -> Arithmetic {
    let until = slot
        .saturating_add(window.kept())
        .saturating_mul(window.slot());
    Arithmetic::new(counter(key, slot))
        .delta(u64::from(cost))
        .initial(u64::from(cost), ttl(now, until))
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

/// The decision on a state rebuilt from the counts: `older[j]` the count
/// of the slot `j + 1` back, `current` the current slot's count before this
/// request.
fn judge(window: &Window, now: u64, slot: u64, older: &[u64], current: u64, cost: u32) -> Decision {
    let len = window.slot();
    let start = |back: u64| slot.saturating_sub(back).saturating_mul(len);
    let decided = match window {
        Window::Fixed(fixed) => {
            let mut state = fixed.new_state(start(0));
            fixed.charge(&mut state, start(0), clamp(current));
            fixed.check(&mut state, now, cost, Mode::Consume)
        }
        Window::Sliding(sliding) => {
            let oldest = older.len() as u64;
            let mut state = sliding.new_state(start(oldest));
            for (back, &n) in (1..=oldest).rev().zip(older.iter().rev()) {
                sliding.charge(&mut state, start(back), clamp(n));
            }
            sliding.charge(&mut state, start(0), clamp(current));
            sliding.check(&mut state, now, cost, Mode::Consume)
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

pub(crate) async fn decide(
    connection: &Connection,
    window: &Window,
    keys: &[String],
    costs: &[u32],
) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
    let now = connection.now();
    let slot = now / window.slot();
    let older = window.kept() - 1;
    let mut ops: Vec<Op> = Vec::with_capacity(keys.len() * window.kept() as usize);
    for (key, &cost) in keys.iter().zip(costs) {
        ops.push(increment(key, slot, cost, now, window).into());
        for back in 1..=older {
            ops.push(Get::new(counter(key, slot.saturating_sub(back))).into());
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
        let incremented = match results.next() {
            Some(Ok(OpResult::Arithmetic(a))) => a.value,
            Some(Err(e)) => return Err(store_error(e)),
            _ => None,
        };
        let Some(after) = incremented else {
            return Err(StoreError::BadReply(
                "an increment without its value".to_owned(),
            ));
        };
        let mut counts = Vec::with_capacity(older as usize);
        for _ in 0..older {
            let read = match results.next() {
                Some(Ok(read)) => read,
                Some(Err(e)) => return Err(store_error(e)),
                None => return Err(StoreError::BadReply("a read missing".to_owned())),
            };
            counts.push(count(Some(&read))?);
        }
        let current = after.saturating_sub(u64::from(cost));
        let decision = judge(window, now, slot, &counts, current, cost);
        if !decision.is_allowed() && cost > 0 {
            give_back.push(Op::from(
                Arithmetic::new(counter(key, slot))
                    .decrement()
                    .delta(u64::from(cost)),
            ));
        }
        decisions.push(Ok(decision));
    }
    if !give_back.is_empty() {
        // Refused requests take back their increments; a lost decrement
        // only leaves the count higher (stricter), so nobody waits for it.
        let client = connection.client().clone();
        tokio::spawn(async move {
            let _ = client.run_batch(give_back).await;
        });
    }
    Ok(decisions)
}

pub(crate) async fn charge(
    connection: &Connection,
    window: &Window,
    key: &str,
    cost: u32,
) -> Result<Receipt, StoreError> {
    let now = connection.now();
    let slot = now / window.slot();
    let op = increment(key, slot, cost, now, window);
    connection.client().run(op).await.map_err(store_error)?;
    Ok(Receipt::remote(now, cost))
}

/// A refund takes its units out of the counter it was charged to while
/// that counter still counts, and returns nothing after (as in process).
pub(crate) async fn refund(
    connection: &Connection,
    window: &Window,
    key: &str,
    receipt: Receipt,
) -> Result<(), StoreError> {
    let now = connection.now();
    let len = window.slot();
    let (slot, charged) = (now / len, receipt.at_nanos() / len);
    if charged > slot || slot - charged >= window.kept() || receipt.cost() == 0 {
        return Ok(());
    }
    let op = Arithmetic::new(counter(key, charged))
        .decrement()
        .delta(u64::from(receipt.cost()));
    // A counter that has expired or was evicted has nothing to give back.
    connection.client().run(op).await.map_err(store_error)?;
    Ok(())
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
            let got = judge(&window, now, slot, &older, current, cost);
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
