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
