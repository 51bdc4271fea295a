use super::*;
use crate::clock::ManualClock;
use proptest::prelude::*;
use std::collections::HashMap;

fn rate(interval: Duration) -> (Rate<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let shape = Shape::rows::<4, 4096>().with_seed(3);
    (
        Rate::try_with_shape(interval, shape, clock.clone()).unwrap(),
        clock,
    )
}

#[test]
fn windows_stay_on_the_grid_after_a_quiet_spell() {
    let (r, clock) = rate(Duration::from_secs(1));
    r.observe(&"k", 1);
    // Quiet until 2.9 s: the window that started at 2 s ends at 3 s, not
    // at 3.9 s as a window started by the first late event would.
    clock.set(Duration::from_millis(2900));
    r.observe(&"k", 7);
    clock.set(Duration::from_millis(3000));
    assert_eq!(r.rate(&"k"), 7.0);
}

#[test]
fn sub_millisecond_intervals_work() {
    let (r, clock) = rate(Duration::from_micros(100));
    for _ in 0..5 {
        r.observe(&"k", 1);
    }
    clock.advance(Duration::from_micros(100));
    // 5 events in 100 µs = 50 000 per second.
    assert_eq!(r.rate(&"k"), 50_000.0);
}

#[test]
fn very_long_intervals_work() {
    let year = Duration::from_secs(365 * 24 * 3600);
    let (r, clock) = rate(year * 100);
    r.observe(&"k", 3);
    clock.advance(year * 100);
    assert!(r.rate(&"k") > 0.0);
    assert!(Rate::try_new(Duration::MAX).is_err());
}

/// With a 1 ns interval the window number is the clock reading; past
/// 2⁶² ns it no longer fits beside the flags. It saturates there:
/// later events all count in the last window, none is zeroed away.
#[test]
fn window_numbers_saturate_past_two_to_the_62_without_losing_events() {
    let (r, clock) = rate(Duration::from_nanos(1));
    let last = LAST_WINDOW;
    clock.set(Duration::from_nanos(last - 1));
    assert_eq!(r.observe(&"k", 5), 5);
    clock.set(Duration::from_nanos(last));
    assert_eq!(r.observe(&"k", 1), 1);
    let mut total = 1;
    for at in [last + 1, last + 6, u64::MAX - 1, u64::MAX] {
        clock.set(Duration::from_nanos(at));
        total += 1;
        assert_eq!(r.observe(&"k", 1), total, "at {at} ns");
        let c = r.components(&"k");
        assert_eq!((c.previous, c.current), (5, total), "at {at} ns");
    }
}

#[test]
fn time_going_backwards_counts_in_the_current_window() {
    let (r, clock) = rate(Duration::from_secs(1));
    clock.set(Duration::from_secs(5));
    r.observe(&"k", 1);
    clock.set(Duration::from_secs(2));
    assert_eq!(r.observe(&"k", 1), 2);
    clock.set(Duration::from_secs(6));
    assert_eq!(r.rate(&"k"), 2.0);
}

#[derive(Debug, Clone)]
enum Op {
    Observe(u8, u8),
    Advance(u32),
    Read(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..8, 0u8..10).prop_map(|(k, n)| Op::Observe(k, n)),
        (0u32..2500).prop_map(Op::Advance),
        (0u8..8).prop_map(Op::Read),
    ]
}

proptest! {
    /// Against an exact model that keeps every event's window number.
    #[test]
    fn matches_an_exact_windowed_model(ops in proptest::collection::vec(op(), 0..200)) {
        let interval = Duration::from_millis(1000);
        let (r, clock) = rate(interval);
        let mut events: HashMap<u8, Vec<(u64, isize)>> = HashMap::new();
        let mut now_ms = 0u64;
        let window = |ms: u64| ms / 1000;
        for op in ops {
            match op {
                Op::Observe(k, n) => {
                    let count = r.observe(&k, n as isize);
                    let list = events.entry(k).or_default();
                    list.push((window(now_ms), n as isize));
                    let expected: isize = list.iter().filter(|(w, _)| *w == window(now_ms)).map(|(_, n)| n).sum();
                    prop_assert_eq!(count, expected);
                }
                Op::Advance(ms) => {
                    now_ms += u64::from(ms);
                    clock.set(Duration::from_millis(now_ms));
                }
                Op::Read(k) => {
                    let c = r.components(&k);
                    let list = events.get(&k).cloned().unwrap_or_default();
                    let sum = |w: u64| -> isize { list.iter().filter(|(x, _)| *x == w).map(|(_, n)| n).sum() };
                    let w = window(now_ms);
                    prop_assert_eq!(c.current, sum(w));
                    prop_assert_eq!(c.previous, if w == 0 { 0 } else { sum(w - 1) });
                    prop_assert_eq!(c.elapsed_fraction, (now_ms % 1000) as f64 / 1000.0);
                }
            }
        }
    }
}

/// A writer whose clock still reads the window a gap's rotation is
/// zeroing (it stalled across the gap, or the clock went back) waits for
/// the rotation and counts in the window it publishes, instead of counting
/// into a sketch being zeroed, where the event would be lost.
#[test]
fn a_writer_behind_a_gap_rotation_counts_in_the_window_it_publishes() {
    let (r, clock) = rate(Duration::from_secs(1));
    r.observe(&"k", 3);
    // A thread of this process claims a rotation from window 0 to window
    // 5 and zeroes every sketch before publishing window 5.
    r.claimed_in.store(fork::forks(), Ordering::Relaxed);
    r.state.store(SKIPPING | ROTATING, Ordering::Release);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            for sketch in &r.windows {
                sketch.reset();
            }
            r.state.store(5 << SHIFT, Ordering::Release);
        });
        // The writer's clock reads window 0.
        assert_eq!(
            r.observe(&"k", 1),
            1,
            "counted into the window being zeroed"
        );
    });
    clock.set(Duration::from_millis(5500));
    let c = r.components(&"k");
    assert_eq!((c.previous, c.current), (0, 1));
}
