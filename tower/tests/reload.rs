//! The reload example's service, reloaded under load: a changed limits
//! file applied on a real SIGHUP and, without one, when the file changes;
//! a file that does not load refused with the field at fault while the
//! limits in force stay; and no request failing meanwhile. Its own test
//! binary, because a signal goes to the whole process.
#![cfg(all(feature = "axum", not(loom)))]

#[path = "../examples/reload/app.rs"]
mod app;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn limits(pk_1: &str, free_limit: u32) -> String {
    format!(
        r#"
[limits]
default = "free"

[limits.tiers]
free = {{ algorithm = "gcra", limit = {free_limit}, per = "1s" }}
paid = {{ algorithm = "gcra", limit = 100000, per = "1s" }}
internal = "unlimited"

[keys]
pk_1 = "{pk_1}"
"#
    )
}

/// Writes `text` to `path` whole, through a file beside it renamed over
/// it, as editors and config-map mounts do: a watcher never reads half a
/// file.
fn write(path: &Path, text: &str) {
    let beside = path.with_extension("new");
    std::fs::write(&beside, text).unwrap();
    std::fs::rename(&beside, path).unwrap();
}

/// What the clients have seen: the last tier named, and the failures.
#[derive(Default)]
struct Seen {
    last_policy: Mutex<String>,
    answers: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

impl Seen {
    fn policy(&self) -> String {
        self.last_policy.lock().unwrap().clone()
    }

    /// Waits up to 10 s for the clients to see `policy`.
    async fn until(&self, policy: &str) {
        for _ in 0..1_000 {
            if self.policy() == policy {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never saw tier `{policy}`: still `{}`", self.policy());
    }
}

/// Four clients on kept-alive connections asking as `pk_1`, until `stop`.
fn load(
    addr: SocketAddr,
    seen: &Arc<Seen>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|_| {
            let (seen, stop) = (Arc::clone(seen), Arc::clone(stop));
            tokio::spawn(async move {
                let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
                while !stop.load(Ordering::Relaxed) {
                    let request = http::Request::get(format!("http://{addr}/"))
                        .header("x-api-key", "pk_1")
                        .body(Empty::new())
                        .unwrap();
                    match client.request(request).await {
                        Ok(response) => {
                            let status = response.status();
                            let policy = response.headers().get("ratelimit-policy").map_or(
                                "-".to_owned(),
                                |v| {
                                    let v = v.to_str().unwrap();
                                    v[1..].split('"').next().unwrap().to_owned()
                                },
                            );
                            let body = response.into_body().collect().await;
                            if !(status == 200 || status == 429) || body.is_err() {
                                seen.failures
                                    .lock()
                                    .unwrap()
                                    .push(format!("{status} {body:?}"));
                            }
                            *seen.last_policy.lock().unwrap() = policy;
                            seen.answers.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => seen.failures.lock().unwrap().push(e.to_string()),
                    }
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_reload_on_sighup_and_on_a_change_without_failing_a_request() {
    let dir = std::env::temp_dir().join(format!("weir-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("limits.toml");
    write(&path, &limits("free", 50));

    let limiter = Arc::new(app::load(&path).unwrap());
    // No polling worth the name: only the signal reloads.
    let deaf = app::Watcher::start(
        Arc::clone(&limiter),
        path.clone(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let deaf = tokio::spawn(deaf.run());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service =
        app::router(Arc::clone(&limiter)).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });

    let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
    let clients = load(addr, &seen, &stop);
    seen.until("free").await;

    // Changed, but not signalled: nothing moves.
    write(&path, &limits("paid", 50));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen.policy(), "free");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    seen.until("paid").await;

    // A file that does not load: refused, naming the field; pk_1 stays paid.
    write(&path, &limits("free", 0));
    let error = app::reload(&limiter, &path).unwrap_err().to_string();
    assert!(
        error.ends_with("limits.tiers.free.limit: a quota of zero units per window allows nothing"),
        "{error}"
    );
    write(&path, &limits("gold", 50));
    let error = app::reload(&limiter, &path).unwrap_err().to_string();
    assert!(
        error.ends_with("keys.pk_1: no tier called `gold` in [limits.tiers]"),
        "{error}"
    );
    assert_eq!(limiter.tiers(), ["free", "internal", "paid"]);

    // Polled: the change alone is enough.
    deaf.abort();
    let watcher = app::Watcher::start(
        Arc::clone(&limiter),
        path.clone(),
        Duration::from_millis(20),
    )
    .unwrap();
    tokio::spawn(watcher.run());
    write(&path, &limits("internal", 50));
    // An unlimited tier sends no fields.
    seen.until("-").await;
    write(&path, &limits("free", 50));
    seen.until("free").await;

    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let failures = seen.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(
        seen.answers.load(Ordering::Relaxed) > 100,
        "too little load to show anything"
    );
    std::fs::remove_dir_all(&dir).ok();
}
