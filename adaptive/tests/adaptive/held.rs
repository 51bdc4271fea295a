//! Responses held open (streams, long polls) beside honest traffic: a
//! probe pins the limit to half, and when held responses fill those
//! places no sample can arrive to close it. A probe then ends at its
//! bound, whatever the clients hold, and the limit is never pinned below
//! what is in flight for longer.

use super::*;
use std::collections::VecDeque;
use weir_adaptive::AdaptiveLimiter;
use weir_adaptive::clock::ManualClock;

/// Honest 5 ms requests offered every millisecond for `seconds` beside
/// `held` guards taken first and never released: how many were admitted,
/// and the longest time (ms) in which none was.
fn honest_beside_held<A: Algorithm>(algorithm: A, held: usize, seconds: u64) -> (u64, u64) {
    let clock = ManualClock::new();
    let limiter = AdaptiveLimiter::with_clock(algorithm, clock.clone());
    let _held: Vec<_> = (0..held)
        .map(|_| limiter.try_acquire().expect("under the initial limit"))
        .collect();
    let mut running = VecDeque::new();
    let (mut admitted, mut longest, mut since) = (0, 0, 0);
    for ms in 0..seconds * 1000 {
        while running.front().is_some_and(|(end, _)| *end <= ms) {
            let (_, guard): (u64, weir_adaptive::AdaptiveGuard<A, ManualClock>) =
                running.pop_front().expect("a front");
            guard.success();
        }
        if let Ok(guard) = limiter.try_acquire() {
            admitted += 1;
            longest = longest.max(ms - since);
            since = ms;
            running.push_back((ms + 5, guard));
        }
        clock.advance(Duration::from_millis(1));
    }
    (admitted, longest.max(seconds * 1000 - since))
}

#[test]
fn a_probe_ends_though_held_responses_fill_its_places() {
    for (name, algorithm) in [
        ("gradient2", AnyAlgorithm::Gradient2(Gradient2::default())),
        ("vegas", AnyAlgorithm::Vegas(Vegas::default())),
        ("aimd", AnyAlgorithm::Aimd(Aimd::default())),
    ] {
        let (admitted, longest) = honest_beside_held(algorithm, 10, 60);
        eprintln!("{name}: {admitted} of 60000 admitted, none for {longest} ms at most");
        // A probe every 10 s (±25 %) shuts the honest requests out for at
        // most its bound (250 ms by default) each time.
        assert!(admitted >= 54_000, "{name}: {admitted} of 60,000 admitted");
        assert!(longest <= 260, "{name}: none admitted for {longest} ms");
    }
}

#[test]
fn without_held_responses_a_probe_still_measures() {
    let algorithm = Gradient2::default();
    let clock = ManualClock::new();
    let limiter = AdaptiveLimiter::with_clock(algorithm, clock.clone());
    let mut running = VecDeque::new();
    for ms in 0..2_000u64 {
        while running.front().is_some_and(|(end, _)| *end <= ms) {
            let (_, guard): (u64, weir_adaptive::AdaptiveGuard<Gradient2, ManualClock>) =
                running.pop_front().expect("a front");
            guard.success();
        }
        if let Ok(guard) = limiter.try_acquire() {
            running.push_back((ms + 5, guard));
        }
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(limiter.no_load(), Some(Duration::from_millis(5)));
}
