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

use crate::harness::contest::Goal;
use crate::harness::machine;
use crate::harness::plot::{LinePlot, Series};
use crate::harness::report::{Report, Table, thousands};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weir_hhh::Classifier;

/// The flood limit every variant enforces (packets per second).
const LIMIT_PPS: u64 = 2_000;
/// The legitimate stream's rate (packets per second).
const LEGIT_PPS: u64 = 500;

/// What one run measured: packets per stream sent and delivered, the
/// server thread's CPU time, and (sent, delivered) per whole second.
struct Run {
    sent: [u64; 2],
    delivered: [u64; 2],
    server_cpu_ns: u64,
    per_second: Vec<(u64, u64)>,
}

/// One more packet in second `start.elapsed()` of `per_second`.
fn count(per_second: &mut Vec<u64>, start: Instant) {
    let second = start.elapsed().as_secs() as usize;
    per_second.resize(per_second.len().max(second + 1), 0);
    per_second[second] += 1;
}

/// Send the flood and the legitimate stream to `server` for `duration`;
/// returns ([flood, legit] sent, sent per second).
fn send(server: SocketAddr, duration: Duration, start: Instant) -> ([u64; 2], Vec<u64>) {
    machine::pin_to_cpu(1);
    let sockets = [(); 2].map(|()| UdpSocket::bind("127.0.0.1:0").expect("bind a sender's socket"));
    let legit_every = Duration::from_nanos(1_000_000_000 / LEGIT_PPS);
    let (mut sent, mut per_second, mut next_legit) = ([0u64; 2], Vec::new(), start);
    loop {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= duration {
            return (sent, per_second);
        }
        let second = elapsed.as_secs() as usize;
        per_second.resize(per_second.len().max(second + 1), 0);
        let mut send = |stream: usize| {
            if sockets[stream].send_to(&[0u8; 32], server).is_ok() {
                sent[stream] += 1;
                per_second[second] += 1;
            }
        };
        if now >= next_legit {
            send(1);
            next_legit += legit_every;
        }
        // A burst of flood between checks of the clock.
        (0..16).for_each(|_| send(0));
    }
}

/// Run the sender against a server that `serve` runs on the bound socket
/// until the stop flag is set, calling back with each packet's source
/// (after echoing it). The streams are told apart after the run by source
/// port: the legitimate stream is the port that delivered fewer packets
/// (the flood is held at a limit four times its rate).
fn run_against(
    duration: Duration,
    serve: impl FnOnce(UdpSocket, &AtomicBool, &mut dyn FnMut(SocketAddr)) + Send,
) -> Run {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the server");
    let addr = socket.local_addr().expect("server address");
    let stop = AtomicBool::new(false);
    let start = Instant::now() + Duration::from_millis(100);
    std::thread::scope(|scope| {
        let served = scope.spawn(|| {
            machine::pin_to_cpu(0);
            let (mut by_port, mut per_second) = (HashMap::<u16, u64>::new(), Vec::new());
            let cpu = machine::thread_cpu_nanos().unwrap_or(0);
            serve(socket, &stop, &mut |peer| {
                *by_port.entry(peer.port()).or_default() += 1;
                count(&mut per_second, start);
            });
            let cpu = machine::thread_cpu_nanos().unwrap_or(0) - cpu;
            let mut counts: Vec<u64> = by_port.into_values().collect();
            counts.sort_unstable();
            let legit = if counts.len() >= 2 { counts[0] } else { 0 };
            ([counts.iter().sum::<u64>() - legit, legit], per_second, cpu)
        });
        std::thread::sleep(Duration::from_millis(100));
        let (sent, sent_per_second) = send(addr, duration, start);
        // Let the server drain what is queued, then stop it.
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        let (delivered, delivered_per_second, server_cpu_ns) =
            served.join().expect("server thread");
        let delivered_in = |s: usize| delivered_per_second.get(s).copied().unwrap_or(0);
        let per_second = sent_per_second
            .iter()
            .enumerate()
            .map(|(s, &sent)| (sent, delivered_in(s)))
            .collect();
        Run {
            sent,
            delivered,
            server_cpu_ns,
            per_second,
        }
    })
}

/// The user-space guard: tokio `GuardedUdpSocket` on a current-thread runtime.
fn user_space(duration: Duration) -> Run {
    run_against(duration, |socket, stop, delivered| {
        socket.set_nonblocking(true).expect("non-blocking");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let socket = tokio::net::UdpSocket::from_std(socket).expect("tokio socket");
            let classifier = std::sync::Arc::new(
                Classifier::builder(LIMIT_PPS)
                    .build()
                    .expect("a valid classifier"),
            );
            let guard =
                weir_hhh::udp::GuardedUdpSocket::try_new(socket, classifier).expect("guard");
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                let received =
                    tokio::time::timeout(Duration::from_millis(10), guard.recv_from(&mut buf))
                        .await;
                if let Ok(Ok((len, peer))) = received {
                    delivered(peer);
                    let _ = guard.send_to(&buf[..len], peer).await;
                }
            }
        });
    })
}

/// The kernel filter on a blocking std socket.
fn in_kernel(duration: Duration) -> Result<Run, weir_hhh::kernel::KernelError> {
    let filter = weir_hhh::kernel::KernelFilter::load(Classifier::builder(LIMIT_PPS))?;
    Ok(run_against(duration, move |socket, stop, delivered| {
        filter.attach(&socket).expect("attach the kernel filter");
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .expect("read timeout");
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((len, peer)) = socket.recv_from(&mut buf) {
                delivered(peer);
                let _ = socket.send_to(&buf[..len], peer);
            }
        }
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
    report.progress("user space");
    let user = user_space(duration);
    report.progress("kernel");
    let kernel = in_kernel(duration);
    let mut table = Table::new(
        "server | flood sent | flood delivered | legit delivered | server CPU | CPU per flood packet",
    );
    let per_flood = |r: &Run| r.server_cpu_ns as f64 / r.sent[0].max(1) as f64;
    let legit = |r: &Run| r.delivered[1] as f64 * 100.0 / r.sent[1].max(1) as f64;
    let mut row = |name: &str, r: &Run| {
        let [sent, legit_sent, flood, delivered] =
            [r.sent[0], r.sent[1], r.delivered[0], r.delivered[1]].map(thousands);
        let (cpu, per_flood, legit) = (r.server_cpu_ns as f64 / 1e6, per_flood(r), legit(r));
        table.row(format!("{name} | {sent} | {flood} | {delivered} of {legit_sent} ({legit:.2}%) | {cpu:.0} ms | {per_flood:.0} ns"));
    };
    row("user space (GuardedUdpSocket)", &user);
    let kernel = match kernel {
        Ok(kernel) => kernel,
        Err(e) => {
            report.table(&table);
            return report.text(&format!("The kernel filter was not measured: {e}."));
        }
    };
    row("kernel (BPF socket filter)", &kernel);
    report.table(&table);
    let (cut, legit) = (per_flood(&user) / per_flood(&kernel), legit(&kernel));
    report.text(&format!(
        "The kernel filter cuts the server's CPU per flood packet **{cut:.1}×** (goal ≥ 3×: {}) and delivers \
         **{legit:.2}%** of the legitimate stream (goal ≥ 99%: {}).",
        Goal::at_least("cut ≥ 3×", 3.0).verdict(cut),
        Goal::at_least("legit ≥ 99%", 99.0).verdict(legit),
    ));
    for (name, run) in [("user-space", &user), ("kernel", &kernel)] {
        let per_second = run
            .per_second
            .iter()
            .enumerate()
            .map(|(s, p)| (s as f64 + 0.5, p));
        let (sent, delivered) = per_second
            .map(|(s, p)| ((s, p.0 as f64), (s, p.1 as f64)))
            .unzip();
        let series = vec![
            Series::line("sent (received by the kernel)", sent),
            Series::dashed("delivered to the server", delivered),
        ];
        let title = format!("Loopback flood, {name} guard: sent vs delivered to the server");
        report.plot(
            &format!("hhh-loopback-{name}"),
            &LinePlot::new(title, "time (s)", "packets per second", series),
        );
    }
}
