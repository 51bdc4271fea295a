//! A master found through Redis Sentinel, and followed through a failover.

use super::*;
use weir_test_support::redis_server::RedisSentinels;

/// Under load, the master is killed: the failure policy answers until the
/// Sentinels promote the replica, then decisions come from the new master
/// — within the failover time, never as errors, and never more than the
/// policy's own limit meanwhile.
#[test]
fn a_failover_moves_decisions_to_the_new_master() -> TestResult {
    let Some(mut set) = RedisSentinels::start_or_skip("sentinel failover", 1, 3)? else {
        return Ok(());
    };
    // Two workers: the fixture waits for the failover on one while the
    // load runs on the other.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let prefix = unique_prefix("sentinel");
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1_000_000))))
            .prefix(prefix.clone())
            .timeout(Duration::from_millis(100))
            .on_failure(FailurePolicy::PerInstance)
            .connect(Target::sentinel(set.urls(), RedisSentinels::MASTER))
            .await?;
        let first = limiter.check_verbose("k", 1).await?;
        assert_eq!(first.source, Source::Store, "{:?}", first.error);

        // Decisions every millisecond, each stamped with its source.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = {
            let (l, stop) = (limiter.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let start = Instant::now();
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let a = l.check_verbose(&format!("k{}", i % 64), 1).await;
                    seen.push((start.elapsed(), a.map(|a| a.source)));
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                (start, seen)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let old = set.kill_master()?;
        let killed_at = Instant::now();
        let new =
            tokio::task::block_in_place(|| set.wait_for_new_master(old, Duration::from_secs(30)))?;
        let promoted_after = killed_at.elapsed();
        // Let the limiter find it, then a while on it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (start, seen) = load.await?;

        let killed = killed_at - start;
        let errors = seen.iter().filter(|(_, s)| s.is_err()).count();
        assert_eq!(errors, 0, "every caller got a decision");
        let from_redis_after = seen
            .iter()
            .find(|(at, s)| *at > killed && matches!(s, Ok(Source::Store)))
            .map(|(at, _)| *at - killed)
            .ok_or("no decision from the new master")?;
        let last_before = seen
            .iter()
            .rev()
            .find(|(at, s)| *at <= killed && matches!(s, Ok(Source::Store)))
            .map_or(Duration::ZERO, |(at, _)| killed - *at);
        let gap = from_redis_after + last_before;
        eprintln!(
            "sentinel failover: Sentinels promoted port {new} {promoted_after:?} after the \
             kill (down-after {:?}); no decision from Redis for {gap:?}; the new master \
             decided {from_redis_after:?} after the kill",
            set.down_after()
        );
        assert!(
            from_redis_after <= promoted_after + Duration::from_millis(800),
            "decisions reached the new master {from_redis_after:?} after the kill, \
             its promotion {promoted_after:?}"
        );
        let between = seen
            .iter()
            .filter(|(at, _)| *at > killed && *at < killed + from_redis_after);
        assert!(
            between.clone().all(|(_, s)| matches!(s, Ok(Source::Local))),
            "the failure policy covered the gap"
        );
        // The state lives on the new master.
        let keys = set
            .server(new)
            .ok_or("new master")?
            .cli(&["KEYS", &format!("{prefix}:*")])?;
        assert!(!keys.trim().is_empty(), "no limiter keys on the new master");
        Ok(())
    })
}

/// A master name the Sentinels do not know is a configuration error, not
/// a limiter that falls back forever.
#[test]
fn an_unknown_master_name_is_a_config_error() -> TestResult {
    let Some(set) = RedisSentinels::start_or_skip("sentinel name", 0, 1)? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let connected = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(10))))
            .connect(Target::sentinel(set.urls(), "no-such-master"))
            .await;
        assert!(
            matches!(connected, Err(ConfigError::Target(_))),
            "{connected:?}"
        );
        let connected = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(10))))
            .connect(Target::server("redis://127.0.0.1:1/").master_auth("u", "p"))
            .await;
        assert!(
            matches!(connected, Err(ConfigError::Invalid(_))),
            "{connected:?}"
        );
        Ok(())
    })
}

/// A service started while its Sentinel-named master is down (the
/// Sentinels know the name but have no master to give) starts on the
/// failure policy and follows the master once the Sentinels name one
/// again; only a name no Sentinel knows is a configuration error.
#[test]
fn a_master_down_at_start_up_is_an_outage_not_an_error() -> TestResult {
    let Some(mut set) = RedisSentinels::start_or_skip("sentinel master down at start", 0, 1)?
    else {
        return Ok(());
    };
    let port = set.kill_master()?;
    // Long enough for the Sentinel to call the master down.
    std::thread::sleep(set.down_after() + Duration::from_millis(1500));
    let target = Target::sentinel(set.urls(), RedisSentinels::MASTER);
    let limiter = rt()?.block_on(async {
        RedisLimiter::builder(Gcra::new(Quota::per_second(nz(10))))
            .prefix(unique_prefix("sentineldown"))
            .backoff(Duration::from_millis(50))
            .connect(target)
            .await
    });
    let limiter = match limiter {
        Ok(limiter) => limiter,
        Err(e) => panic!("a master down at start-up is not an error: {e:?}"),
    };
    rt()?.block_on(async {
        let answer = limiter.check_verbose("k", 1).await?;
        assert_ne!(answer.source, Source::Store, "{answer:?}");
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    set.server(port).ok_or("the master")?.restart()?;
    rt()?.block_on(async {
        let mut back = false;
        for _ in 0..300 {
            if limiter.check_verbose("k", 1).await?.source == Source::Store {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(back, "the master never decided after it came back");
        Ok(())
    })
}

/// A service that reads its store from configuration: one address string
/// (a server's, or the Sentinels'), one limiter type whatever it names,
/// and the same exact decisions as the in-process limiter it replaces.
#[test]
fn a_limiter_chosen_by_its_address_decides_as_one_type() -> TestResult {
    use weir_rate::{AnyLimiter, CheckKeyAsync};
    let Some(set) = RedisSentinels::start_or_skip("limiter chosen by address", 0, 1)? else {
        return Ok(());
    };
    let ports: Vec<String> = set
        .urls()
        .iter()
        .map(|u| {
            u.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    let master = format!("redis://127.0.0.1:{}/", set.master_port()?);
    let sentinels = format!(
        "redis+sentinel://{}/{}",
        ports.join(","),
        RedisSentinels::MASTER
    );
    let quota = Quota::per_hour(nz(5));
    rt()?.block_on(async {
        for address in ["memory", master.as_str(), sentinels.as_str()] {
            let prefix = unique_prefix("any");
            let connect = || async {
                let limiter: AnyLimiter<str> = match address {
                    "memory" => AnyLimiter::new(KeyedLimiter::<String, _>::new(Gcra::new(quota))),
                    address => AnyLimiter::new(
                        RedisLimiter::builder(Gcra::new(quota))
                            .prefix(prefix.clone())
                            .connect(Target::parse(address)?)
                            .await?,
                    ),
                };
                Ok::<_, Box<dyn std::error::Error>>(limiter)
            };
            let allowed = |limiter: AnyLimiter<str>| async move {
                let mut allowed = 0;
                for _ in 0..8 {
                    allowed += u32::from(limiter.check_n_async("k", 1).await?.is_allowed());
                }
                Ok::<_, Box<dyn std::error::Error>>(allowed)
            };
            assert_eq!(allowed(connect().await?).await?, 5, "{address}");
            // Another instance: on the store, it finds the key spent.
            let again = allowed(connect().await?).await?;
            assert_eq!(again, if address == "memory" { 5 } else { 0 }, "{address}");
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
