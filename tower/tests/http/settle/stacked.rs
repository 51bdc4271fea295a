//! The stacked recipe for several limits where a store has no
//! all-or-nothing set: a daily limit outside settling by
//! [`Settle::admitted`], a per-second one inside, both on Redis, with
//! clients that hang up at every step (before the outer check answers,
//! between the two checks, while the origin works, while the body goes
//! out). The daily limit is spent by exactly the requests that reached the
//! origin, and with Redis stalling ten times a second the origin still
//! never serves more than it.

use super::*;
use std::io::{Read, Write};
use weir_rate::Gcra;
use weir_redis::{RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;
use weir_test_support::stalls::Stalling;

const DAILY: u32 = 40;

fn prefix(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("stacked-{name}-{}-{nanos}", std::process::id())
}

/// A small xorshift: each client's own sequence of hang-up points.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One request from a raw socket: read to the end, or hang up after
/// `hang_up_after` with a reset (the server then drops whatever it was
/// doing for it).
fn one_request(addr: SocketAddr, hang_up_after: Option<Duration>) {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(PATIENCE));
    let request = "GET /work HTTP/1.1\r\nhost: x\r\nx-user: alice\r\nconnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return;
    }
    match hang_up_after {
        Some(after) => {
            std::thread::sleep(after);
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
        }
        None => {
            let mut response = Vec::new();
            let _ = stream.read_to_end(&mut response);
        }
    }
}

/// Requests that reached the origin, and the daily units Redis counts as
/// spent once every settlement has landed, after 25 clients (one request
/// in eight hung up 0–4 ms in) for three seconds.
fn stacked_run(stalling: bool) -> Option<(u32, u32)> {
    let server = RedisServer::start_or_skip("stacked recipe").expect("fixture")?;
    let served = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let url = server.url();
    // With Redis stalling, a 30 ms timeout sends calls to the failure
    // policy, as the stalling test means to. Without, a call must not time
    // out on a loaded machine either: an answer of the per-instance
    // fallback spends nothing on Redis, and the exact count below would
    // miss it.
    let timeout = if stalling {
        Duration::from_millis(30)
    } else {
        Duration::from_secs(1)
    };
    let (addr, daily) = runtime.block_on(async {
        let daily = RedisLimiter::builder(FixedWindow::new(Quota::per_day(
            NonZeroU32::new(DAILY).unwrap(),
        )))
        .prefix(prefix("daily"))
        .timeout(timeout)
        .backoff(Duration::from_millis(20))
        .connect(Target::server(url.clone()))
        .await
        .expect("a limiter");
        let per_second = RedisLimiter::builder(Gcra::new(
            Quota::per_second(NonZeroU32::new(20).unwrap())
                .allow_burst(NonZeroU32::new(5).unwrap()),
        ))
        .prefix(prefix("second"))
        .timeout(timeout)
        .backoff(Duration::from_millis(20))
        .connect(Target::server(url))
        .await
        .expect("a limiter");
        let counted = Arc::clone(&served);
        let app = Router::new()
            .route(
                "/work",
                get(move || {
                    let counted = Arc::clone(&counted);
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        streamed(4, 64, None)
                    }
                }),
            )
            .layer(
                tower::ServiceBuilder::new()
                    .layer(RateLimitLayer::new(daily.clone(), by_user()).settle(Settle::admitted()))
                    .layer(RateLimitLayer::new(per_second, by_user())),
            );
        (serve(app).await, daily)
    });
    let pid = server.pid().expect("a server process");
    let stalls = stalling
        .then(|| Stalling::start(pid, Duration::from_millis(60), Duration::from_millis(100)));
    let clients: Vec<_> = (0..25u64)
        .map(|i| {
            std::thread::spawn(move || {
                let mut state = 0x9E37_79B9_7F4A_7C15 ^ (i + 1);
                let until = std::time::Instant::now() + Duration::from_secs(3);
                while std::time::Instant::now() < until {
                    let r = next(&mut state);
                    let hang_up = r
                        .is_multiple_of(8)
                        .then(|| Duration::from_micros((r >> 8) % 4000));
                    one_request(addr, hang_up);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client");
    }
    drop(stalls);
    // Settlements (refunds) finish after their responses; one waiting out
    // a back-off lands once Redis answers again.
    std::thread::sleep(Duration::from_millis(500));
    let left = runtime.block_on(async {
        let peek = daily.check_verbose("alice", 0).await.expect("a peek");
        assert_eq!(peek.source, weir_redis::Source::Store, "{:?}", peek.error);
        peek.decision.remaining()
    });
    drop(runtime);
    let served = u32::try_from(served.load(Ordering::SeqCst)).expect("a count");
    eprintln!(
        "stacked (stalling: {stalling}): served {served}, daily spent {}",
        DAILY - left
    );
    Some((served, DAILY - left))
}

/// Every daily unit spent is a request the origin saw: a hang-up between
/// the two checks costs nothing, one after the origin took the request
/// keeps its unit, as one that read its response does.
#[test]
fn the_stacked_recipe_spends_the_outer_limit_on_what_reached_the_origin() {
    let Some((served, spent)) = stacked_run(false) else {
        return;
    };
    assert!(served <= DAILY, "served {served} against {DAILY}");
    assert_eq!(
        spent, served,
        "the daily limit counts {spent} spent for {served} requests the origin saw"
    );
}

/// Redis stalling past the timeout ten times a second: still never more
/// served than the daily limit.
#[test]
fn the_stacked_recipe_never_serves_past_the_outer_limit_while_the_store_stalls() {
    let Some((served, _)) = stacked_run(true) else {
        return;
    };
    assert!(served > 0, "nothing was served");
    assert!(served <= DAILY, "served {served} against {DAILY}");
}
