use super::*;
use std::time::Duration;
use weir_store::Kind;

fn record(allowed: u8, remaining: f64, reset: f64, retry: f64) -> Vec<u8> {
    let mut r = vec![allowed];
    for x in [remaining, reset, retry] {
        r.extend_from_slice(&x.to_le_bytes());
    }
    r
}

#[test]
fn decode_rounds_as_the_in_process_limiters() {
    // remaining down, durations up, with the doubles' error absorbed
    let raw = decode(&record(1, 4.999_999_999_9, 1_000.000_000_000_1, 0.0));
    assert_eq!(
        raw,
        Raw {
            allowed: true,
            remaining: 5,
            reset_after_us: 1000,
            retry_after_us: 0
        }
    );
    let raw = decode(&record(0, 4.5, 1000.5, 2.25));
    assert_eq!(
        raw,
        Raw {
            allowed: false,
            remaining: 4,
            reset_after_us: 1001,
            retry_after_us: 3
        }
    );
}

#[test]
fn decode_never_yields_a_negative_or_garbage_value() {
    let raw = decode(&record(1, -3.0, -0.5, f64::NAN));
    assert_eq!(
        (raw.remaining, raw.reset_after_us, raw.retry_after_us),
        (0, 0, 0)
    );
    let raw = decode(&record(0, 1e30, f64::INFINITY, 1e300));
    assert_eq!(
        (raw.remaining, raw.reset_after_us, raw.retry_after_us),
        (u64::MAX, u64::MAX, u64::MAX)
    );
    // only 1 means allowed
    assert!(!decode(&record(2, 0.0, 0.0, 0.0)).allowed);
}

const ALL_KINDS: [Kind; 4] = [
    Kind::TokenBucket,
    Kind::Gcra {
        emission_interval: Duration::from_nanos(1),
    },
    Kind::FixedWindow,
    Kind::SlidingWindow {
        counters: 2,
        sub_window: Duration::from_nanos(1),
    },
];

/// Each limit's block reads its own slice of the arguments, in order.
#[test]
fn generated_scripts_give_each_limit_its_own_arguments() {
    let set = [ALL_KINDS[3], ALL_KINDS[1], ALL_KINDS[2]];
    let script = all_of_check(&set);
    assert!(script.contains("local ARGV = { unpack(ALL, 1, 3) }"));
    assert!(script.contains("local ARGV = { unpack(ALL, 4, 5) }"));
    assert!(script.contains("local ARGV = { unpack(ALL, 6, 7) }"));
    assert!(script.contains("local P, L = 7, 3"));
    assert!(
        script.contains("pack('<BdddBdddBddd', a0, r0, t0, y0, a1, r1, t1, y1, a2, r2, t2, y2)")
    );
    let settle = settle(&set);
    assert!(settle.contains("local P = 7"));
    assert!(settle.contains("settle_2(KEYS[3], vals[3], op, cost, at)"));
    assert!(!script.contains("--[[") && !settle.contains("--[["));
}

#[test]
fn every_script_has_its_pieces_pasted_in() {
    for algorithm in ALL_KINDS {
        let script = check(algorithm);
        assert!(!script.contains("--[["), "a placeholder was left in");
        let body = body(algorithm);
        assert!(
            body.params
                .contains(&format!("local P = {}", body.params_len)),
            "{algorithm}: params_len is not its P"
        );
    }
}
