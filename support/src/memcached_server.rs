//! Private Memcached servers for tests and benchmarks.
//!
//! Each [`MemcachedServer`] is a real `memcached` process on a free loopback
//! port (UDP off), with the memory it is given; it is killed on drop. It
//! can be killed and restarted on the same port (with an empty cache, as a
//! real restart leaves it), and stopped and continued (`SIGSTOP` /
//! `SIGCONT`), a server that holds its connections but answers nothing.
//! Nothing here talks to anything but `127.0.0.1`.
//!
//! When `memcached` is not installed, [`MemcachedServer::start_or_skip`]
//! skips loudly (returns `Ok(None)`), except under `CI=true`.
//!
//! ```no_run
//! use weir_test_support::memcached_server::MemcachedServer;
//!
//! # fn demo() -> Result<(), weir_test_support::process::FixtureError> {
//! let Some(server) = MemcachedServer::start_or_skip("my test")? else {
//!     return Ok(()); // skipped: no memcached here
//! };
//! assert!(server.version()?.starts_with("VERSION"));
//! # Ok(())
//! # }
//! ```

use crate::process::{FixtureError, free_port, runs, skip_unless, wait_until};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Whether `memcached` can be run here.
pub fn installed() -> bool {
    runs("memcached")
}

/// A private `memcached` on a loopback port; killed on drop.
#[derive(Debug)]
pub struct MemcachedServer {
    child: Option<Child>,
    port: u16,
    memory_mb: u32,
    extra: Vec<String>,
}

impl MemcachedServer {
    /// A server with 64 MB of memory.
    pub fn start() -> Result<Self, FixtureError> {
        Self::start_with(64, &[])
    }

    /// [`start`](Self::start), or `Ok(None)` to skip (see the module docs).
    pub fn start_or_skip(what: &str) -> Result<Option<Self>, FixtureError> {
        if !skip_unless(installed(), what, "memcached is", "memcached")? {
            return Ok(None);
        }
        Self::start().map(Some)
    }

    /// A server with `memory_mb` megabytes for items (`-m`) and extra
    /// `memcached` arguments.
    pub fn start_with(memory_mb: u32, extra: &[&str]) -> Result<Self, FixtureError> {
        let mut last = None;
        for _ in 0..5 {
            let mut s = Self {
                child: None,
                port: free_port()?,
                memory_mb,
                extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            };
            match s.spawn() {
                Ok(()) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| FixtureError::NotReady("could not start".into())))
    }

    fn spawn(&mut self) -> Result<(), FixtureError> {
        let mut command = Command::new("memcached");
        // memcached refuses to run as root unless told whom to run as.
        #[cfg(unix)]
        // SAFETY: `geteuid` reads the process's credentials and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            command.args(["-u", "root"]);
        }
        let child = command
            .args(["-l", "127.0.0.1", "-U", "0"])
            .args(["-p", &self.port.to_string()])
            .args(["-m", &self.memory_mb.to_string()])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        let ready = wait_until(Duration::from_secs(10), || {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(_)) = c.try_wait()
            {
                return true; // exited: reported below
            }
            self.version().is_ok()
        });
        let exited = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
        if !ready || exited {
            self.kill();
            return Err(FixtureError::NotReady(format!(
                "memcached on port {} did not start",
                self.port
            )));
        }
        Ok(())
    }

    /// The server's answer to `version`.
    pub fn version(&self) -> Result<String, FixtureError> {
        Ok(self.command("version")?.remove(0))
    }

    /// Send one text-protocol command and read its reply: one line, or
    /// for `stats` and `mg` with a value, up to `END`/the value.
    pub fn command(&self, command: &str) -> Result<Vec<String>, FixtureError> {
        let stream = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(200),
        )?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut writer = stream.try_clone()?;
        writer.write_all(command.as_bytes())?;
        writer.write_all(b"\r\n")?;
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stream);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
            let line = line.trim_end().to_owned();
            let last = !command.starts_with("stats") || line == "END";
            let value_follows = line.starts_with("VA ");
            lines.push(line);
            if last && !value_follows {
                break;
            }
        }
        Ok(lines)
    }

    /// A counter of `stats` (`evictions`, `curr_items`, ...), 0 if absent.
    pub fn stat(&self, name: &str) -> Result<u64, FixtureError> {
        let prefix = format!("STAT {name} ");
        Ok(self
            .command("stats")?
            .iter()
            .find_map(|l| l.strip_prefix(prefix.as_str())?.parse().ok())
            .unwrap_or(0))
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kill the server at once (SIGKILL), as a crash would: every count
    /// it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the server again on the same port, empty.
    pub fn restart(&mut self) -> Result<(), FixtureError> {
        self.kill();
        let mut last = None;
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last.unwrap_or_else(|| FixtureError::NotReady("restart".into())))
    }

    /// Stop the server (`SIGSTOP`): connections stay open, nothing is
    /// answered, until [`resume`](Self::resume).
    #[cfg(unix)]
    pub fn pause(&self) -> Result<(), FixtureError> {
        let pid = self
            .pid()
            .ok_or(FixtureError::NotReady("not running".into()))?;
        crate::process::stop(pid)
    }

    /// Continue a paused server (`SIGCONT`).
    #[cfg(unix)]
    pub fn resume(&self) -> Result<(), FixtureError> {
        let pid = self
            .pid()
            .ok_or(FixtureError::NotReady("not running".into()))?;
        crate::process::signal(pid, false)
    }
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL.
        self.kill();
    }
}
