//! Redis's own load generator, for the ceilings weir is measured against.

use std::process::{Command, Stdio};

/// Requests per second of one `redis-benchmark` run (`--csv`).
pub(super) fn redis_benchmark(port: u16, args: &[&str]) -> Option<f64> {
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--csv"])
        .args(args);
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('"'))?;
    line.split(',')
        .nth(1)?
        .trim_matches('"')
        .parse::<f64>()
        .ok()
}
