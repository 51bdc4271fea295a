//! A UDP echo service protected by weir-hhh.
//!
//! ```text
//! cargo run --example udp_echo -p weir-hhh -- [ADDR] [LIMIT_PPS]
//! ```
//!
//! Defaults: `127.0.0.1:7007`, 100 packets/s. Every datagram that passes the
//! classifier is echoed back; flood packets are dropped before the echo loop
//! sees them, and each second the service prints what it passed and dropped
//! per level. Try it with a flood from one port beside a slow sender:
//!
//! ```text
//! yes | head -c 2000000 | nc -u -w1 127.0.0.1 7007   # flood
//! echo hi | nc -u -w1 127.0.0.1 7007                 # still answered
//! ```

use std::sync::Arc;
use std::time::Duration;
use weir_hhh::Classifier;
use weir_hhh::udp::GuardedUdpSocket;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7007".to_string());
    let limit: u64 = match args.next().map(|s| s.parse()) {
        None => 100,
        Some(Ok(limit)) => limit,
        Some(Err(e)) => {
            eprintln!("udp_echo: LIMIT_PPS must be a whole number: {e}");
            std::process::exit(2);
        }
    };
    let classifier = match Classifier::try_new(limit) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("udp_echo: {e}");
            std::process::exit(2);
        }
    };
    let socket = tokio::net::UdpSocket::bind(&addr).await?;
    let guard = GuardedUdpSocket::try_new(socket, Arc::clone(&classifier))?;
    println!(
        "echoing on {} with a limit of {limit} pps per generalisation ({} KiB of sketches)",
        guard.local_addr(),
        classifier.memory_bytes() / 1024
    );

    let stats = Arc::clone(&classifier);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut last = stats.stats();
        loop {
            tick.tick().await;
            let now = stats.stats();
            if now != last {
                let per_level: Vec<String> = now
                    .levels
                    .iter()
                    .map(|l| format!("{}/{}", l.passed, l.dropped))
                    .collect();
                println!(
                    "passed {} dropped {} (limited passed/dropped by level 0-4: {})",
                    now.passed(),
                    now.dropped(),
                    per_level.join(" ")
                );
                last = now;
            }
        }
    });

    let mut buf = vec![0u8; 65_536];
    let (mut drops, mut unanswered) = (0u64, 0u64);
    loop {
        let (len, peer) = guard
            .recv_from_inspect(&mut buf, |peer, verdict| {
                if let weir_hhh::Verdict::Drop(why) = verdict {
                    // Explain the first drop and every 1000th after it, to
                    // keep the output readable under a flood.
                    if drops.is_multiple_of(1000) {
                        eprintln!("drop #{} from {peer}: {why}", drops + 1);
                    }
                    drops += 1;
                }
            })
            .await?;
        // A sender can make its own reply fail (a spoofed source port 0 is
        // delivered but cannot be answered): skip it, never stop serving.
        if let Err(e) = guard.send_to(&buf[..len], peer).await {
            if unanswered.is_multiple_of(1000) {
                eprintln!("no reply #{} to {peer}: {e}", unanswered + 1);
            }
            unanswered += 1;
        }
    }
}
