//! What every server fixture shares: free loopback ports, private
//! directories, waiting for readiness, and the rule for a missing server
//! (skip loudly, except under `CI=true`, where it is a failure).

use std::fmt;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Why a fixture could not be set up. Its `Debug` form is the message,
/// so a test returning it as an error says what to do.
#[non_exhaustive]
pub enum FixtureError {
    /// The server is not installed and `CI=true`: what to install.
    Missing(&'static str),
    /// Spawning, waiting for, or talking to a process failed.
    Io(std::io::Error),
    /// The server or cluster did not become ready in time.
    NotReady(String),
}

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(packages) => write!(
                f,
                "a server the tests need is not installed, and CI=true forbids skipping them \
                 (apt-get install {packages})"
            ),
            Self::Io(e) => write!(f, "fixture: {e}"),
            Self::NotReady(s) => write!(f, "fixture not ready: {s}"),
        }
    }
}

impl fmt::Debug for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for FixtureError {}

impl From<std::io::Error> for FixtureError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Whether the program `bin` (e.g. `redis-benchmark`) can be run here:
/// `bin --version` succeeds (or, for servers that answer `-V`, that).
pub fn runs(bin: &str) -> bool {
    ["--version", "-V"].iter().any(|flag| {
        Command::new(bin)
            .arg(flag)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `Ok(true)` when `installed`; otherwise a loud notice that `what` is
/// skipped for want of `programs` and `Ok(false)`, or under `CI=true`
/// [`FixtureError::Missing`] naming the Debian `packages` to install.
pub fn skip_unless(
    installed: bool,
    what: &str,
    programs: &str,
    packages: &'static str,
) -> Result<bool, FixtureError> {
    if installed {
        return Ok(true);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        return Err(FixtureError::Missing(packages));
    }
    // Straight to the process's stderr: the test harness captures
    // `eprintln!`, and this notice must be seen even when the test passes.
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED {what}: {programs} not installed.\n\
         !!! Install them (apt-get install {packages});\n\
         !!! under CI=true this is a failure, not a skip.\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    );
    Ok(false)
}

/// A free loopback port whose cluster bus port (`port + 10000`) is free too
/// (Redis Cluster needs both; the other servers just take the first).
pub fn free_port() -> Result<u16, FixtureError> {
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if port > 55_000 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(FixtureError::NotReady("no free port pair".into()))
}

/// A fresh directory for the `server` on `port`, under the system's
/// temporary directory.
pub fn temp_dir(server: &str, port: u16) -> Result<PathBuf, FixtureError> {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-{server}-{}-{}-{port}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Poll `f` every 20 ms until it returns true or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stop (`SIGSTOP`) or continue (`SIGCONT`) the process `pid`: a server
/// that stalls, holding its connections open but answering nothing.
#[cfg(unix)]
pub fn signal(pid: u32, stop: bool) -> Result<(), FixtureError> {
    let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| FixtureError::NotReady(format!("no such process {pid}")))?;
    // SAFETY: `kill` has no memory effects on this process; `pid` is a
    // child this fixture started.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Stops `pid` (`SIGSTOP`) and returns once every thread of it is
/// stopped: `kill` only queues the signal, and a thread already running on
/// another core would otherwise answer one more request.
#[cfg(unix)]
pub fn stop(pid: u32) -> Result<(), FixtureError> {
    signal(pid, true)?;
    let tasks = format!("/proc/{pid}/task");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let Ok(entries) = std::fs::read_dir(&tasks) else {
            // No procfs (not Linux): the signal is all there is.
            return Ok(());
        };
        let all_stopped = entries.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                // The state follows the parenthesised command name.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
            })
        });
        if all_stopped {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(FixtureError::NotReady(format!(
                "process {pid} did not stop"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
