//! The open-loop load: Poisson arrivals offered to the guarded backend,
//! its capacity halved and restored on schedule, every request recorded.

use super::contenders::{Backend, Contender, router};
use super::{CLIENT_TIMEOUT, OUTSTANDING};
use crate::machine;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::SeedableRng;
use rand_distr::Distribution;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a request of the generator ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// 200.
    Served,
    /// 503 from the limiter.
    Refused,
    /// Another status, an error, or the client's timeout.
    Failed,
    /// Never sent: too many outstanding.
    GaveUp,
}

/// One request of the generator: when it was sent (since the run began),
/// how long it took, how it ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    pub(super) sent: Duration,
    pub(super) latency: Duration,
    pub(super) kind: Kind,
}

/// One contender's run: its requests, the backend's mean service time,
/// and (seconds since the start, limit) every 50 ms.
pub(super) struct Run {
    pub(super) records: Vec<Record>,
    pub(super) service: Duration,
    pub(super) limits: Vec<(f64, u32)>,
}

/// The three phases (full capacity, halved, restored), each `each` long,
/// and the backend's measured capacity at full `C`, requests per second.
#[derive(Debug, Clone, Copy)]
pub(super) struct Phases {
    pub(super) each: Duration,
    pub(super) full: f64,
}

impl Phases {
    pub(super) fn total(&self) -> Duration {
        self.each * 3
    }

    /// When capacity is halved, and when restored.
    pub(super) fn changes(&self) -> [Duration; 2] {
        [self.each, self.each * 2]
    }

    /// The backend's capacity (requests per second) at `t`.
    pub(super) fn capacity(&self, t: Duration) -> f64 {
        let [halved, restored] = self.changes();
        if t >= halved && t < restored {
            self.full / 2.0
        } else {
            self.full
        }
    }
}

/// Poisson arrivals at `rate` per second for `total`, from `seed`.
pub(super) fn schedule(rate: f64, total: Duration, seed: u64) -> Vec<Duration> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let gap = rand_distr::Exp::new(rate).expect("positive rate");
    let mut t = gap.sample(&mut rng);
    let mut arrivals = Vec::new();
    while t < total.as_secs_f64() {
        arrivals.push(Duration::from_secs_f64(t));
        t += gap.sample(&mut rng);
    }
    arrivals
}

/// Serves the backend behind `contender` and offers it `arrivals`, halving
/// and restoring its capacity on `phases` (none if `phases` is `None`).
pub(super) fn load(
    contender: Contender,
    arrivals: &[Duration],
    phases: Option<Phases>,
    unloaded_p99: Duration,
) -> Run {
    let backend = Backend::new();
    let (app, probe) = router(contender, &backend, unloaded_p99);
    let (_server, client_rt, addr) = machine::serve_loopback(app);
    client_rt.block_on(async move {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(OUTSTANDING)
            .build(connector);
        let uri: http::Uri = format!("http://{addr}/").parse().expect("uri");
        // Open the first connections before the clock starts.
        for _ in 0..4 {
            if let Ok(response) = client.get(uri.clone()).await {
                let _ = response.into_body().collect().await;
            }
        }
        let start = tokio::time::Instant::now();
        let end = arrivals.last().copied().unwrap_or_default();
        let controller = phases.map(|phases| {
            let backend = backend.clone();
            tokio::spawn(async move {
                let [halved, restored] = phases.changes();
                tokio::time::sleep_until(start + halved).await;
                backend.halve();
                tokio::time::sleep_until(start + restored).await;
                backend.restore();
            })
        });
        let sampler = tokio::spawn(async move {
            let (mut limits, mut tick) =
                (Vec::new(), tokio::time::interval(Duration::from_millis(50)));
            loop {
                tick.tick().await;
                let t = start.elapsed();
                if t > end {
                    return limits;
                }
                limits.extend(probe().map(|limit| (t.as_secs_f64(), limit)));
            }
        });
        let records = Arc::new(Mutex::new(Vec::with_capacity(arrivals.len())));
        let outstanding = Arc::new(AtomicUsize::new(0));
        for &at in arrivals {
            tokio::time::sleep_until(start + at).await;
            if outstanding.load(Ordering::Relaxed) >= OUTSTANDING {
                let record = Record {
                    sent: at,
                    latency: Duration::ZERO,
                    kind: Kind::GaveUp,
                };
                records.lock().expect("records").push(record);
                continue;
            }
            outstanding.fetch_add(1, Ordering::Relaxed);
            let (client, uri) = (client.clone(), uri.clone());
            let (records, outstanding) = (Arc::clone(&records), Arc::clone(&outstanding));
            tokio::spawn(async move {
                let (sent, t0) = (start.elapsed(), Instant::now());
                let answer = tokio::time::timeout(CLIENT_TIMEOUT, async {
                    let response = client.get(uri).await.ok()?;
                    let status = response.status();
                    response.into_body().collect().await.ok()?;
                    Some(status)
                })
                .await;
                let kind = match answer {
                    Ok(Some(StatusCode::OK)) => Kind::Served,
                    Ok(Some(StatusCode::SERVICE_UNAVAILABLE)) => Kind::Refused,
                    _ => Kind::Failed,
                };
                records.lock().expect("records").push(Record {
                    sent,
                    latency: t0.elapsed(),
                    kind,
                });
                outstanding.fetch_sub(1, Ordering::Relaxed);
            });
        }
        let drained = tokio::time::Instant::now() + CLIENT_TIMEOUT + Duration::from_millis(500);
        while outstanding.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < drained {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(controller) = controller {
            let _ = controller.await;
        }
        let limits = sampler.await.unwrap_or_default();
        let mut records = std::mem::take(&mut *records.lock().expect("records"));
        records.sort_by_key(|r| r.sent);
        Run {
            records,
            service: backend.service_time(),
            limits,
        }
    })
}
