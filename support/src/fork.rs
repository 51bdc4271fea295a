//! A forked child for tests of what a process keeps across `fork()`: run a
//! closure in the child, let the parent do its part, then wait for the
//! child's verdict, bounded in time.
//!
//! Fork from a test binary that runs no other test thread (one test per
//! binary), as the child inherits only the forking thread and any lock
//! another thread held stays held in it.

use std::time::{Duration, Instant};

/// A forked child running a test's closure; [`wait`](Self::wait) for its
/// exit code.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
}

/// The exit code of a child whose closure panicked.
pub const PANICKED: i32 = 101;

/// Fork; the child runs `child` and leaves with the code it returns
/// ([`PANICKED`] if it panics) without running the parent's exit hooks.
pub fn spawn(child: impl FnOnce() -> i32) -> Child {
    // SAFETY: the child runs only the caller's Rust code on this thread,
    // then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(PANICKED);
        // SAFETY: ends the child without running the parent's atexit hooks.
        unsafe { libc::_exit(code) };
    }
    Child { pid }
}

impl Child {
    /// The child's exit code. Panics if it does not exit normally within
    /// `limit` (it is killed first), or was killed by a signal.
    pub fn wait(self, limit: Duration) -> i32 {
        let start = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: `pid` is our child; `status` is a valid out-pointer.
            let waited = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if waited == self.pid {
                break;
            }
            assert_eq!(waited, 0, "waitpid: {}", std::io::Error::last_os_error());
            if start.elapsed() > limit {
                // SAFETY: `pid` is our child, not yet reaped.
                unsafe {
                    libc::kill(self.pid, libc::SIGKILL);
                    libc::waitpid(self.pid, &mut status, 0);
                }
                panic!("the child hung for {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(libc::WIFEXITED(status), "the child did not exit normally");
        libc::WEXITSTATUS(status)
    }
}

/// In a forked child: cap the address space just above what the process
/// uses now (1 MiB more), so that no new thread's stack fits and the
/// operating system refuses to start one, while small allocations still
/// succeed. Root is not exempt, unlike the process-count limit. Never
/// call it in the test process itself.
pub fn refuse_new_threads() -> std::io::Result<()> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| std::io::Error::other("unreadable /proc/self/statm"))?;
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let limit = pages * page + (1 << 20);
    let cap = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: a valid rlimit for this process.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &cap) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
