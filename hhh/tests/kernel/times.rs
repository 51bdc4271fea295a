//! Wild and backward times: one packet stamped far in the future, and a
//! replayed clock that goes back, leave the kernel and the classifier in
//! agreement.

use super::*;

/// One packet stamped far in the future must not freeze the kernel's cells
/// either, and the kernel must treat it as the classifier does: the same
/// verdicts and rates around it, and an honest key at half the limit keeps
/// passing.
#[test]
fn kernel_and_classifier_agree_around_far_future_times() {
    const LIMIT: u64 = 100;
    let test = "kernel_and_classifier_agree_around_far_future_times";
    let honest = FourTuple::from_socket_addrs(
        "10.1.1.1:4000".parse().unwrap(),
        "10.9.9.9:53".parse().unwrap(),
    );
    let stranger = FourTuple::from_socket_addrs(
        "172.16.5.5:999".parse().unwrap(),
        "10.9.9.9:7".parse().unwrap(),
    );
    for (what, wild) in [
        ("a day ahead", 2_000_000_000 + 86_400_000_000_000),
        ("u64::MAX ns", u64::MAX),
    ] {
        let Some(mut filter) = load_or_skip(test, Classifier::builder(LIMIT).seed(3)) else {
            return;
        };
        // The classifier judges wildness against its own clock: one that
        // stands at 2 s, where the schedule's honest packets are (the
        // default clock counts from the Unix epoch, decades past them).
        let standing = ManualClock::new();
        standing.set(Duration::from_secs(2));
        let rake = Classifier::builder(LIMIT)
            .seed(3)
            .clock(standing)
            .random(ConstantRandom(u32::MAX))
            .build()
            .unwrap();
        // (time, tuple): 50 pps of the honest key for 1 s, the stranger's
        // wild time, 50 pps of the honest key for 10 s more.
        let mut schedule: Vec<(u64, FourTuple)> = (0..50)
            .map(|k| (1_000_000_000 + k * 20_000_000, honest))
            .collect();
        schedule.push((wild, stranger));
        schedule.extend((0..500).map(|k| (2_000_000_000 + k * 20_000_000, honest)));
        let mut before = filter.stats().unwrap();
        let mut dropped = 0;
        for (i, &(now, tuple)) in schedule.iter().enumerate() {
            let user = user_outcome(Ok(rake.classify_at(&tuple, Timestamp::from_nanos(now))));
            let run = filter
                .test_run_at(
                    &ethernet_frame(&udp_packet(&tuple, b"x")),
                    now,
                    Some(u32::MAX),
                )
                .unwrap();
            let after = filter.stats().unwrap();
            let kernel = kernel_outcome(&before, &after);
            before = after;
            assert_eq!(user, kernel, "{what}: packet {i} at {now} ns");
            dropped += u64::from(tuple == honest && !run.passed());
        }
        assert_eq!(
            dropped, 0,
            "{what}: the kernel dropped {dropped} of 550 honest packets"
        );
        let end = 12_000_000_000;
        for tuple in [honest, stranger] {
            for g in Generalisation::ALL {
                assert_eq!(
                    filter.estimate_at(&tuple, g, end).unwrap(),
                    rake.estimate_at(&tuple, g, Timestamp::from_nanos(end)),
                    "{what}: {tuple} {g}"
                );
            }
        }
    }
}

/// A replayed time stands for the kernel clock's reading, so a replayed
/// time a window or more behind the cells' stamps (the clock going back)
/// makes the kernel take the stamps for wild ones; the classifier judges
/// wildness against its own clock, and agrees with the kernel packet for
/// packet when that clock reads the replayed times (here a flood with one
/// of its packets 120 ms back every 150 ms).
#[test]
fn kernel_and_classifier_agree_when_the_replayed_clock_goes_back() {
    const LIMIT: u64 = 100;
    let test = "kernel_and_classifier_agree_when_the_replayed_clock_goes_back";
    let Some(mut filter) = load_or_skip(test, Classifier::builder(LIMIT).seed(3)) else {
        return;
    };
    let clock = ManualClock::new();
    let coin = SharedCoin::default();
    let rake = Classifier::builder(LIMIT)
        .seed(3)
        .clock(clock.clone())
        .random(coin.clone())
        .build()
        .unwrap();
    let flood = FourTuple::from_socket_addrs(
        "10.1.1.1:4000".parse().unwrap(),
        "10.9.9.9:53".parse().unwrap(),
    );
    let mut schedule = Vec::new();
    for k in 0..1500u64 {
        let now = 1_000_000_000 + k * 1_000_000;
        schedule.push(now);
        if k % 150 == 149 {
            schedule.push(now - 120_000_000);
        }
    }
    let mut coins = SplitMix64::new(7);
    let mut before = filter.stats().unwrap();
    for (i, &now) in schedule.iter().enumerate() {
        let c = (coins.next_u64() >> 32) as u32;
        coin.0.store(c, Ordering::Relaxed);
        clock.set(Duration::from_nanos(now));
        let user = user_outcome(Ok(rake.classify(&flood)));
        filter
            .test_run_at(&ethernet_frame(&udp_packet(&flood, b"x")), now, Some(c))
            .unwrap();
        let after = filter.stats().unwrap();
        assert_eq!(
            user,
            kernel_outcome(&before, &after),
            "packet {i} at {now} ns"
        );
        before = after;
    }
    let end = schedule.last().copied().unwrap();
    for g in Generalisation::ALL {
        assert_eq!(
            filter.estimate_at(&flood, g, end).unwrap(),
            rake.estimate_at(&flood, g, Timestamp::from_nanos(end)),
            "{g}"
        );
    }
}
