//! Private Redis servers and clusters for tests and benchmarks.
//!
//! Each [`RedisServer`] is a real `redis-server` process on a free loopback
//! port, with persistence off (`--save ""`, `--appendonly no`) and its own
//! temporary directory; it is killed and its directory removed on drop.
//! A [`RedisCluster`] is a set of them joined with
//! `redis-cli --cluster create`; [`RedisSentinels`], a master, its replicas
//! and the `redis-sentinel` processes watching them. With the feature
//! `tls`, [`RedisServer::start_tls`] serves TLS with certificates of a
//! [`CertificateAuthority`] made by the test. Nothing here ever talks to a shared
//! instance or to anything but `127.0.0.1`.
//!
//! When `redis-server` is not installed, [`RedisServer::start_or_skip`]
//! prints a loud notice and returns `Ok(None)` so the caller can pass as
//! skipped — except when the environment variable `CI` is `true`, where it
//! returns [`FixtureError::Missing`] so the run fails.
//!
//! ```no_run
//! use weir_test_support::redis_server::RedisServer;
//!
//! # fn demo() -> Result<(), weir_test_support::redis_server::FixtureError> {
//! let Some(server) = RedisServer::start_or_skip("my test")? else {
//!     return Ok(()); // skipped: no redis-server here
//! };
//! assert_eq!(server.cli(&["PING"])?.trim(), "PONG");
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use crate::process::{FixtureError, runs, wait_until};
use crate::process::{free_port, skip_unless, temp_dir};

/// Whether `redis-server` (and `redis-cli`) can be run here.
pub fn installed() -> bool {
    runs("redis-server") && runs("redis-cli")
}

/// `Ok(true)` when the Redis tests can run; `Ok(false)` (after a loud
/// notice naming `what`) when they must be skipped; `Err` when
/// `redis-server` is missing under `CI=true`.
pub fn available_or_skip(what: &str) -> Result<bool, FixtureError> {
    skip_unless(
        installed(),
        what,
        "redis-server/redis-cli",
        "redis-server redis-tools",
    )
}

/// A private `redis-server` on a loopback port; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// A program the server runs under (e.g. `valgrind` and its options).
    wrapper: Vec<String>,
    /// Its TLS port and certificates' directory, when it serves TLS.
    #[cfg(feature = "tls")]
    tls: Option<tls::TlsPort>,
}

impl RedisServer {
    /// Start a server (retrying on another port if the first is taken).
    pub fn start() -> Result<Self, FixtureError> {
        Self::start_with(&[])
    }

    /// The server's process id, while it runs (for reading its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// [`start`](Self::start), or `Ok(None)` to skip (see the module docs).
    pub fn start_or_skip(what: &str) -> Result<Option<Self>, FixtureError> {
        if !available_or_skip(what)? {
            return Ok(None);
        }
        Self::start().map(Some)
    }

    /// Start a server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Result<Self, FixtureError> {
        Self::start_under(&[], extra)
    }

    /// Start a server under `wrapper`, a program and its arguments that
    /// run `redis-server` (e.g. `["valgrind", "--tool=callgrind"]`, for
    /// counting the server's instructions), with extra server arguments.
    pub fn start_under(wrapper: &[&str], extra: &[&str]) -> Result<Self, FixtureError> {
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut s = Self {
                child: None,
                port,
                dir: temp_dir("redis", port)?,
                extra: extra.iter().map(|s| (*s).to_owned()).collect(),
                wrapper: wrapper.iter().map(|s| (*s).to_owned()).collect(),
                #[cfg(feature = "tls")]
                tls: None,
            };
            match s.spawn() {
                Ok(()) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| FixtureError::NotReady("could not start".into())))
    }

    fn spawn(&mut self) -> Result<(), FixtureError> {
        let log = self.dir.join("redis.log");
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg("redis-server");
                c
            }
            None => Command::new("redis-server"),
        };
        let child = command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
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
            self.ping()
        });
        let exited = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
        if !ready || exited {
            self.kill();
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(FixtureError::NotReady(format!(
                "redis-server on port {} did not start: {}",
                self.port,
                log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            )));
        }
        Ok(())
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING")
            .query::<String>(&mut con)
            .is_ok_and(|s| s == "PONG")
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kill the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the server again on the same port, with an empty dataset and
    /// an empty script cache (persistence is off). A cluster node keeps its
    /// identity from `nodes.conf` in its directory.
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

    /// How often `command` ran and how long it took, from `INFO
    /// commandstats` (since start or `CONFIG RESETSTAT`); zero for a
    /// command that has not run. `command` is named as INFO names it:
    /// `evalsha`, `eval`, `script|load`, …
    pub fn command_stats(&self, command: &str) -> Result<CommandStats, FixtureError> {
        let info = self.cli(&["INFO", "commandstats"])?;
        Ok(CommandStats::parse(&info, command))
    }

    /// Run `redis-cli -p <port> args…` and return its standard output.
    pub fn cli(&self, args: &[&str]) -> Result<String, FixtureError> {
        cli(self.port, args)
    }

    /// `ACL SETUSER user on >password rules…`; panics (failing the test)
    /// if the server refuses the rules.
    pub fn add_user(
        &self,
        user: &str,
        password: &str,
        rules: &[String],
    ) -> Result<(), FixtureError> {
        let password = format!(">{password}");
        let mut args = vec!["ACL", "SETUSER", user, "on", &password];
        args.extend(rules.iter().map(String::as_str));
        let out = self.cli(&args)?;
        assert_eq!(out.trim(), "OK", "ACL SETUSER {user}: {out}");
        Ok(())
    }
}

/// The ACL rules of a user that may run a limiter on one server under
/// `prefix` and nothing else: the commands weir-redis's crate docs list.
/// A cluster adds `+cluster|slots` and `+asking`, a Sentinel's user `+role`.
pub fn limiter_acl(prefix: &str) -> Vec<String> {
    [
        "resetkeys",
        &format!("~{prefix}:*"),
        "resetchannels",
        "-@all",
        "+evalsha",
        "+script|load",
        "+mget",
        "+set",
        "+setrange",
        "+time",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `redis-cli` against the server (or Sentinel) on loopback `port`: its
/// standard output.
pub(crate) fn cli(port: u16, args: &[&str]) -> Result<String, FixtureError> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let _ = std::fs::remove_dir_all(&tls.dir);
        }
    }
}

/// One command's line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommandStats {
    /// Times the command ran.
    pub calls: u64,
    /// Microseconds it ran for, in all.
    pub usec: f64,
}

impl CommandStats {
    /// `command`'s line of an `INFO commandstats` reply; zero when absent.
    fn parse(info: &str, command: &str) -> Self {
        let prefix = format!("cmdstat_{command}:");
        let Some(line) = info
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        else {
            return Self::default();
        };
        let field = |name: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        };
        Self {
            calls: field("calls").and_then(|v| v.parse().ok()).unwrap_or(0),
            usec: field("usec").and_then(|v| v.parse().ok()).unwrap_or(0.0),
        }
    }
}

mod cluster;
mod sentinel;
#[cfg(feature = "tls")]
mod tls;
pub use cluster::{NodeInfo, RedisCluster};
pub use sentinel::RedisSentinels;
#[cfg(feature = "tls")]
pub use tls::{CertificateAuthority, ClientCertificates, Issued};

#[cfg(test)]
mod tests {
    use super::CommandStats;

    #[test]
    fn command_stats_read_one_commands_line() {
        let info = "# Commandstats\r\n\
            cmdstat_eval:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0\r\n\
            cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0\r\n\
            cmdstat_script|load:calls=2,usec=7,usec_per_call=3.50\r\n";
        let stats = |c| CommandStats::parse(info, c);
        assert_eq!(
            stats("evalsha"),
            CommandStats {
                calls: 12,
                usec: 345.0
            }
        );
        assert_eq!(
            stats("eval"),
            CommandStats {
                calls: 3,
                usec: 90.0
            }
        );
        assert_eq!(stats("script|load").calls, 2);
        // `usec` is not `usec_per_call`; an absent command ran zero times.
        assert_eq!(stats("get"), CommandStats::default());
    }
}
