//! weir-hhh end to end on loopback: a UDP echo server under a flood, once
//! guarded in user space (`GuardedUdpSocket`: every flood packet still
//! costs the server a `recvfrom` and a classification) and once behind the
//! kernel filter (`weir_hhh::kernel::KernelFilter`: flood packets are
//! dropped before they are queued to the socket).
//!
//! One sender thread (pinned to core 1) sends, from 127.0.0.1, a flood from
//! one source port as fast as it can and a legitimate stream from another
//! port at a fixed rate, for a fixed time; the server thread (pinned to
//! core 0) echoes what it is given and counts it per stream. The figure is
//! the server thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) per flood packet
//! sent, and the share of the legitimate stream the server got.

use crate::machine;
use crate::plot::{LinePlot, Series};
use crate::report::{Report, Table, thousands};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weir_hhh::Classifier;

/// The flood limit every variant enforces (packets per second).
const LIMIT_PPS: u64 = 2_000;
/// The legitimate stream's rate (packets per second).
const LEGIT_PPS: u64 = 500;

/// What one run measured.
struct Run {
    flood_sent: u64,
    legit_sent: u64,
    flood_delivered: u64,
    legit_delivered: u64,
    server_cpu_ns: u64,
    /// Per whole second since the start: (sent, delivered).
    per_second: Vec<(u64, u64)>,
}

/// What the server got, per stream and per second. The streams are told
/// apart after the run by source port ([`split_streams`]).
#[derive(Default)]
struct Delivered {
    flood: u64,
    legit: u64,
    per_second: Vec<u64>,
}

impl Delivered {
    fn count(&mut self, start: Instant) {
        let second = start.elapsed().as_secs() as usize;
        if self.per_second.len() <= second {
            self.per_second.resize(second + 1, 0);
        }
        self.per_second[second] += 1;
    }
}

/// Send the flood and the legitimate stream to `server` for `duration`;
/// returns (flood sent, legit sent, sent per second).
fn send(server: SocketAddr, duration: Duration, start: Instant) -> (u64, u64, Vec<u64>) {
    machine::pin_to_cpu(1);
    let flood = UdpSocket::bind("127.0.0.1:0").expect("bind the flood's socket");
    let legit = UdpSocket::bind("127.0.0.1:0").expect("bind the legitimate socket");
    let payload = [0u8; 32];
    let legit_every = Duration::from_nanos(1_000_000_000 / LEGIT_PPS);
    let (mut flood_sent, mut legit_sent) = (0u64, 0u64);
    let mut per_second = Vec::new();
    let mut next_legit = start;
    loop {
        let now = Instant::now();
        let elapsed = now - start;
        if elapsed >= duration {
            break;
        }
        let second = elapsed.as_secs() as usize;
        if per_second.len() <= second {
            per_second.resize(second + 1, 0);
        }
        if now >= next_legit {
            if legit.send_to(&payload, server).is_ok() {
                legit_sent += 1;
                per_second[second] += 1;
            }
            next_legit += legit_every;
        }
        // A burst of flood between checks of the clock.
        for _ in 0..16 {
            if flood.send_to(&payload, server).is_ok() {
                flood_sent += 1;
                per_second[second] += 1;
            }
        }
    }
    (flood_sent, legit_sent, per_second)
}

/// Run the sender against a server built by `server` (which binds, is
/// handed the stop flag and the start instant, and returns its counts).
fn run_against(
    duration: Duration,
    server: impl FnOnce(UdpSocket, Arc<AtomicBool>, Instant) -> (Delivered, u64) + Send,
) -> Run {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the server");
    let addr = socket.local_addr().expect("server address");
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now() + Duration::from_millis(100);
    std::thread::scope(|scope| {
        let served = scope.spawn({
            let stop = Arc::clone(&stop);
            move || {
                machine::pin_to_cpu(0);
                server(socket, stop, start)
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        let (flood_sent, legit_sent, sent_per_second) = send(addr, duration, start);
        // Let the server drain what is queued, then stop it.
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        let (delivered, server_cpu_ns) = served.join().expect("server thread");
        let per_second = sent_per_second
            .iter()
            .enumerate()
            .map(|(s, &sent)| (sent, delivered.per_second.get(s).copied().unwrap_or(0)))
            .collect();
        Run {
            flood_sent,
            legit_sent,
            flood_delivered: delivered.flood,
            legit_delivered: delivered.legit,
            server_cpu_ns,
            per_second,
        }
    })
}

/// The classifier both servers use (the kernel filter is built from the
/// same builder).
fn classifier() -> Classifier {
    Classifier::builder(LIMIT_PPS)
        .build()
        .expect("a valid classifier")
}

/// The user-space guard: tokio `GuardedUdpSocket` on a current-thread runtime.
fn user_space(duration: Duration) -> Run {
    run_against(duration, |socket, stop, start| {
        socket.set_nonblocking(true).expect("non-blocking");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let socket = tokio::net::UdpSocket::from_std(socket).expect("tokio socket");
            let guard = weir_hhh::udp::GuardedUdpSocket::try_new(socket, Arc::new(classifier()))
                .expect("guard");
            let mut delivered = Delivered::default();
            let mut by_port = std::collections::HashMap::<u16, u64>::new();
            let mut buf = [0u8; 2048];
            let cpu = machine::thread_cpu_nanos().unwrap_or(0);
            while !stop.load(Ordering::Relaxed) {
                let received =
                    tokio::time::timeout(Duration::from_millis(10), guard.recv_from(&mut buf))
                        .await;
                if let Ok(Ok((len, peer))) = received {
                    *by_port.entry(peer.port()).or_default() += 1;
                    delivered.count(start);
                    let _ = guard.send_to(&buf[..len], peer).await;
                }
            }
            let cpu = machine::thread_cpu_nanos().unwrap_or(0) - cpu;
            split_streams(&mut delivered, &by_port);
            (delivered, cpu)
        })
    })
}

/// Recount per stream: the legitimate stream is the source port that
/// delivered fewer packets (the flood is held at a limit four times its
/// rate).
fn split_streams(delivered: &mut Delivered, by_port: &std::collections::HashMap<u16, u64>) {
    let mut counts: Vec<u64> = by_port.values().copied().collect();
    counts.sort_unstable();
    let total: u64 = counts.iter().sum();
    delivered.legit = if counts.len() >= 2 { counts[0] } else { 0 };
    delivered.flood = total - delivered.legit;
}

/// The kernel filter on a blocking std socket.
fn in_kernel(duration: Duration) -> Result<Run, weir_hhh::kernel::KernelError> {
    let filter = weir_hhh::kernel::KernelFilter::load(Classifier::builder(LIMIT_PPS))?;
    Ok(run_against(duration, move |socket, stop, start| {
        filter.attach(&socket).expect("attach the kernel filter");
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .expect("read timeout");
        let mut delivered = Delivered::default();
        let mut by_port = std::collections::HashMap::<u16, u64>::new();
        let mut buf = [0u8; 2048];
        let cpu = machine::thread_cpu_nanos().unwrap_or(0);
        while !stop.load(Ordering::Relaxed) {
            if let Ok((len, peer)) = socket.recv_from(&mut buf) {
                *by_port.entry(peer.port()).or_default() += 1;
                delivered.count(start);
                let _ = socket.send_to(&buf[..len], peer);
            }
        }
        let cpu = machine::thread_cpu_nanos().unwrap_or(0) - cpu;
        split_streams(&mut delivered, &by_port);
        drop(filter);
        (delivered, cpu)
    }))
}

/// The report section (`--only hhh-loopback`).
pub fn run(report: &mut Report) {
    let duration = report
        .scale()
        .pick(Duration::from_secs(2), Duration::from_secs(4));
    report.section("weir-hhh end to end: a UDP echo server under a loopback flood");
    report.text(&format!(
        "One sender thread (core 1) sends from 127.0.0.1 a flood from one source port, as fast as it can, \
         and a legitimate stream of {LEGIT_PPS} packets/s from another port, for {} s; the server thread (core 0) \
         echoes what it receives. Limit {LIMIT_PPS} packets/s. 'user space': tokio `GuardedUdpSocket` \
         (every packet is read, then classified); 'kernel': the BPF socket filter attached to a plain socket \
         (flood packets are dropped before they are queued). Server CPU is its thread's CPU time.",
        duration.as_secs()
    ));
    let user = user_space(duration);
    let kernel = in_kernel(duration);
    let mut table = Table::new([
        "server",
        "flood sent",
        "flood delivered",
        "legit delivered",
        "server CPU",
        "CPU per flood packet",
    ]);
    let mut row = |name: &str, r: &Run| {
        table.row([
            name.to_string(),
            thousands(r.flood_sent),
            thousands(r.flood_delivered),
            format!(
                "{} of {} ({:.2}%)",
                thousands(r.legit_delivered),
                thousands(r.legit_sent),
                r.legit_delivered as f64 * 100.0 / r.legit_sent.max(1) as f64
            ),
            format!("{:.0} ms", r.server_cpu_ns as f64 / 1e6),
            format!(
                "{:.0} ns",
                r.server_cpu_ns as f64 / r.flood_sent.max(1) as f64
            ),
        ]);
    };
    row("user space (GuardedUdpSocket)", &user);
    let kernel = match kernel {
        Ok(kernel) => kernel,
        Err(e) => {
            report.table(&table);
            report.text(&format!("The kernel filter was not measured: {e}."));
            return;
        }
    };
    row("kernel (BPF socket filter)", &kernel);
    report.table(&table);
    let per_flood = |r: &Run| r.server_cpu_ns as f64 / r.flood_sent.max(1) as f64;
    let cut = per_flood(&user) / per_flood(&kernel);
    let legit = kernel.legit_delivered as f64 * 100.0 / kernel.legit_sent.max(1) as f64;
    report.text(&format!(
        "The kernel filter cuts the server's CPU per flood packet **{cut:.1}×** (goal ≥ 3×: {}) and delivers \
         **{legit:.2}%** of the legitimate stream (goal ≥ 99%: {}).",
        if cut >= 3.0 { "met" } else { "**not met**" },
        if legit >= 99.0 { "met" } else { "**not met**" },
    ));
    for (name, run) in [("user-space", &user), ("kernel", &kernel)] {
        let points = |pick: fn(&(u64, u64)) -> u64| -> Vec<(f64, f64)> {
            run.per_second
                .iter()
                .enumerate()
                .map(|(s, p)| (s as f64 + 0.5, pick(p) as f64))
                .collect()
        };
        report.plot(
            &format!("hhh-loopback-{name}"),
            &LinePlot {
                title: format!("Loopback flood, {name} guard: sent vs delivered to the server"),
                x_label: "time (s)".into(),
                y_label: "packets per second".into(),
                series: vec![
                    Series::line("sent (received by the kernel)", points(|p| p.0)),
                    Series::dashed("delivered to the server", points(|p| p.1)),
                ],
                ..LinePlot::default()
            },
        );
    }
}
