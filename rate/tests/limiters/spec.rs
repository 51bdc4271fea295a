//! Limits read from a file: every algorithm as its typed constructor
//! builds it, all-or-nothing pairs, tiers, and each mistake refused with
//! the typed constructors' own error at the field's path.
#![cfg(feature = "serde")]

use std::time::Duration;
use weir_rate::spec::FromSpec;
use weir_rate::spec::{LimitsSpec, Period, TiersSpec};
use weir_rate::{
    Algorithm, ConfigError, FixedWindow, Gcra, Mode, Quota, SlidingLog, SlidingWindow,
    TieredLimiter, TokenBucket,
};

fn limits(text: &str) -> LimitsSpec {
    #[derive(serde::Deserialize)]
    struct File {
        limit: LimitsSpec,
    }
    toml::from_str::<File>(text).expect("a valid file").limit
}

/// The decisions of `a` and `b` on the same checks: equal when they are
/// the same limit.
fn same<L: Algorithm>(a: &L, b: &L) {
    let (mut sa, mut sb) = (a.new_state(0), b.new_state(0));
    for i in 0..200u64 {
        let now = i * 37_000_000;
        let da = a
            .check(&mut sa, now, 1, Mode::Consume)
            .map(|d| (d.is_allowed(), d.remaining()));
        let db = b
            .check(&mut sb, now, 1, Mode::Consume)
            .map(|d| (d.is_allowed(), d.remaining()));
        assert_eq!(da.ok(), db.ok(), "check {i}");
    }
}

#[test]
fn every_algorithm_is_read_as_its_constructor_builds_it() {
    let quota = Quota::try_new(10, Duration::from_secs(1)).unwrap();
    let burst = quota.allow_burst(weir_rate::nonzero!(25));
    let from = |text: &str| limits(text);
    same(
        &Gcra::try_from_spec(
            &from(r#"limit = { algorithm = "gcra", limit = 10, per = "1s", burst = 25 }"#),
            "limit",
        )
        .unwrap(),
        &Gcra::new(burst),
    );
    same(
        &TokenBucket::try_from_spec(
            &from(r#"limit = { algorithm = "token_bucket", limit = 10, per = "1000ms" }"#),
            "limit",
        )
        .unwrap(),
        &TokenBucket::new(quota),
    );
    same(
        &FixedWindow::try_from_spec(
            &from(r#"limit = { algorithm = "fixed_window", limit = 10, per = "1s" }"#),
            "limit",
        )
        .unwrap(),
        &FixedWindow::new(quota),
    );
    same(
        &SlidingWindow::try_from_spec(
            &from(
                r#"limit = { algorithm = "sliding_window", limit = 10, per = "1s", counters = 5 }"#,
            ),
            "limit",
        )
        .unwrap(),
        &SlidingWindow::try_new(quota, 5).unwrap(),
    );
    same(
        &SlidingWindow::try_from_spec(
            &from(r#"limit = { algorithm = "sliding_window", limit = 10, per = "1s" }"#),
            "limit",
        )
        .unwrap(),
        &SlidingWindow::try_new(quota, 2).unwrap(),
    );
    same(
        &SlidingLog::try_from_spec(
            &from(r#"limit = { algorithm = "sliding_log", limit = 10, per = "1s" }"#),
            "limit",
        )
        .unwrap(),
        &SlidingLog::new(quota),
    );
    let pair = <(Gcra, FixedWindow)>::try_from_spec(
        &from(
            r#"limit = [
            { algorithm = "gcra", limit = 10, per = "1s" },
            { algorithm = "fixed_window", limit = 1000, per = "1d" },
        ]"#,
        ),
        "limit",
    )
    .unwrap();
    same(
        &pair,
        &(
            Gcra::new(quota),
            FixedWindow::new(Quota::try_new(1000, Duration::from_secs(86_400)).unwrap()),
        ),
    );
}

#[test]
fn each_mistake_names_its_field_and_the_typed_error() {
    let error = |text: &str| {
        let spec = limits(text);
        match SlidingWindow::try_from_spec(&spec, "limits.api") {
            Err(e) => (e.field().to_owned(), e.config().cloned(), e.to_string()),
            Ok(_) => panic!("{text} was taken"),
        }
    };
    let (field, config, text) =
        error(r#"limit = { algorithm = "sliding_window", limit = 0, per = "1s" }"#);
    assert_eq!(
        (field.as_str(), config),
        ("limits.api.limit", Some(ConfigError::ZeroRate))
    );
    assert_eq!(
        text,
        "limits.api.limit: a quota of zero units per window allows nothing"
    );
    let (field, config, _) =
        error(r#"limit = { algorithm = "sliding_window", limit = 5, per = "0s" }"#);
    assert_eq!(
        (field.as_str(), config),
        ("limits.api.per", Some(ConfigError::ZeroWindow))
    );
    let (field, config, _) =
        error(r#"limit = { algorithm = "sliding_window", limit = 5, per = "1s", counters = 1 }"#);
    assert_eq!(field, "limits.api.counters");
    assert!(matches!(
        config,
        Some(ConfigError::BadSubWindows { counters: 1 })
    ));
    let (field, config, text) = error(r#"limit = { algorithm = "gcra", limit = 5, per = "1s" }"#);
    assert_eq!((field.as_str(), config), ("limits.api.algorithm", None));
    assert_eq!(
        text,
        "limits.api.algorithm: `gcra` where sliding_window is needed"
    );
    let (field, _, _) =
        error(r#"limit = { algorithm = "sliding_window", limit = 5, per = "1s", burst = 9 }"#);
    assert_eq!(field, "limits.api.burst", "a burst a window does not have");
    let zero_burst = Gcra::try_from_spec(
        &limits(r#"limit = { algorithm = "gcra", limit = 5, per = "1s", burst = 0 }"#),
        "x",
    );
    assert_eq!(
        zero_burst.unwrap_err().config(),
        Some(&ConfigError::ZeroBurst)
    );
    let two = limits(
        r#"limit = [{ algorithm = "gcra", limit = 5, per = "1s" }, { algorithm = "gcra", limit = 50, per = "1m" }]"#,
    );
    assert_eq!(Gcra::try_from_spec(&two, "x").unwrap_err().field(), "x");
    // What serde refuses, the file's parser reports with the key.
    for bad in [
        r#"limit = { algorithm = "gcra", limit = 5, per = "1 fortnight" }"#,
        r#"limit = { algorithm = "gcra", limit = 5, per = "1s", brust = 9 }"#,
        r#"limit = { algorithm = "leaky", limit = 5, per = "1s" }"#,
        r#"limit = { algorithm = "gcra", limit = -5, per = "1s" }"#,
    ] {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct File {
            limit: LimitsSpec,
        }
        assert!(toml::from_str::<File>(bad).is_err(), "{bad} was taken");
    }
    assert_eq!(
        "250ms".parse::<Period>().unwrap().0,
        Duration::from_millis(250)
    );
    assert_eq!(
        "1d".parse::<Period>().unwrap().0,
        Duration::from_secs(86_400)
    );
    assert!("99999999999999d".parse::<Period>().is_err());
}

#[test]
fn tiers_from_a_file_limit_each_key_by_its_tier() {
    let spec: TiersSpec = toml::from_str(
        r#"
        default = "free"
        [tiers]
        free = { algorithm = "gcra", limit = 2, per = "1m" }
        paid = { algorithm = "gcra", limit = 10, per = "1m" }
        internal = "unlimited"
        "#,
    )
    .unwrap();
    let limiter = TieredLimiter::<String, Gcra, _>::try_new(
        spec.tiers().unwrap(),
        &spec.default,
        |key: &str| match key {
            "pk" => Some("paid"),
            "ops" => Some("internal"),
            _ => None,
        },
    )
    .unwrap();
    let allowed = |key: &str| (0..50).filter(|_| limiter.check(key).is_allowed()).count();
    assert_eq!(
        [allowed("anon"), allowed("pk"), allowed("ops")],
        [2, 10, 50]
    );
    let zero: TiersSpec = toml::from_str(
        r#"
        default = "free"
        tiers = { free = { algorithm = "gcra", limit = 2, per = "1m" }, paid = { algorithm = "gcra", limit = 0, per = "1m" } }
        "#,
    )
    .unwrap();
    assert_eq!(
        zero.tiers::<Gcra>().unwrap_err().field(),
        "tiers.paid.limit"
    );
}
