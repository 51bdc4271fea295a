//! What the numbers were measured on (printed at the top of every report),
//! and the machine-level probes the load runs use: CPU clocks of a thread
//! and of a process, and pinning a thread to a core.

use std::fs;
use std::future::IntoFuture;
use std::net::SocketAddr;
use tokio::runtime::Runtime;

/// Cores, CPU model and kernel of this machine, as a Markdown paragraph.
pub fn describe() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown CPU".to_string(), |m| m.trim().to_string());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("Machine: {cores} cores, {model}, Linux {}.", kernel.trim())
}

/// The competitors and runtimes measured, with the versions this build
/// locked, as a Markdown sentence.
pub fn crate_versions() -> String {
    const LOCK: &str = include_str!("../../../Cargo.lock");
    let names = [
        "pingora-limits",
        "pingora-timeout",
        "governor",
        "dashmap",
        "tokio",
        "redis",
        "ahash",
    ];
    let versions = names.map(|name| locked_version(LOCK, name).map(|v| format!("{name} {v}")));
    let versions: Vec<String> = versions.into_iter().flatten().collect();
    format!(
        "Crates: weir {}, {}.",
        env!("CARGO_PKG_VERSION"),
        versions.join(", ")
    )
}

/// The version of `name` in a Cargo.lock text (the first entry, if several).
fn locked_version<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("name = \"{name}\"\nversion = \"");
    let start = lock.find(&needle)? + needle.len();
    let end = lock[start..].find('"')? + start;
    Some(&lock[start..end])
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the system clock.
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day)
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// CPU time the calling thread has run, in ns (`CLOCK_THREAD_CPUTIME_ID`;
/// `None` where the clock is unavailable). On a shared machine it excludes
/// the time other processes held the core.
pub fn thread_cpu_nanos() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(u64::try_from(ts.tv_sec).ok()? * 1_000_000_000 + u64::try_from(ts.tv_nsec).ok()?)
}

/// CPU seconds (user + system) process `pid` has used so far, from
/// `/proc/<pid>/stat`; `None` off Linux or when the process is gone.
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks / hz as f64)
}

/// How long a cache line takes to go from one thread to another and back,
/// in ns: the median of nine rounds in which two threads pass a counter
/// between them `trips` times (a round in which either thread was
/// preempted counts the wait, so one such round must not decide). Two-thread
/// figures of contended structures move with it, and on a shared VM it
/// moves with where the host puts the cores, so a report prints it beside
/// them.
pub fn cross_core_round_trip_ns(trips: u64) -> f64 {
    let mut rounds: Vec<f64> = (0..9).map(|_| round_trip_round(trips)).collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn round_trip_round(trips: u64) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    let turn = AtomicU64::new(0);
    let started = std::sync::Barrier::new(2);
    let pass = |mine: u64| {
        started.wait();
        let start = std::time::Instant::now();
        for trip in 0..trips {
            let at = 2 * trip + mine;
            let mut spins = 0u32;
            while turn.load(Ordering::Acquire) != at {
                // On one core the other thread runs only if this one
                // yields; on two it never waits this long.
                spins += 1;
                if spins.is_multiple_of(1024) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            turn.store(at + 1, Ordering::Release);
        }
        start.elapsed()
    };
    let elapsed = std::thread::scope(|s| {
        let other = s.spawn(|| pass(1));
        let mine = pass(0);
        mine.max(other.join().expect("the other thread"))
    });
    elapsed.as_nanos() as f64 / trips.max(1) as f64
}

/// Pin the calling thread to one CPU (best effort: a no-op where the
/// kernel refuses), so that load-run server and client threads stop
/// trading places on the cores.
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: `set` is a plain bit set on a zeroed, correctly sized
    // `cpu_set_t`, and `sched_setaffinity(0, ..)` only changes the calling
    // thread's affinity; a failure leaves it unchanged and is ignored.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A one-worker tokio runtime whose threads all run on `cpu`.
pub fn pinned_runtime(cpu: usize) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(1)
        .on_thread_start(move || pin_to_cpu(cpu));
    builder.enable_all().build().expect("tokio runtime")
}

/// Serves `app` on 127.0.0.1 from a one-worker runtime pinned to the
/// first core, and makes the client's one-worker runtime, pinned to the
/// second, so that server and client threads stop trading places: (server
/// runtime, client runtime, the server's address). Dropping the server's
/// runtime stops it.
pub fn serve_loopback(app: axum::Router) -> (Runtime, Runtime, SocketAddr) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (server, client) = (pinned_runtime(0), pinned_runtime(1 % cores));
    let listener = server
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    server.spawn(
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .into_future(),
    );
    (server, client, addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_from_a_lock_file() {
        let lock = "[[package]]\nname = \"tokio\"\nversion = \"1.2.3\"\n";
        assert_eq!(locked_version(lock, "tokio"), Some("1.2.3"));
        assert_eq!(locked_version(lock, "redis"), None);
    }

    #[test]
    fn converts_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
    }
}
