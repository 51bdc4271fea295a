//! A master, its replicas and the Sentinels watching them, all private
//! processes on loopback, with failovers as fast as Sentinel allows.

use super::RedisServer;
use crate::process::{FixtureError, free_port, runs, skip_unless, temp_dir, wait_until};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a master may go unanswered before the Sentinels call it down
/// (ms): short, so a failover in a test takes about two seconds.
const DOWN_AFTER_MS: u64 = 1000;

/// A master and replicas watched by Sentinels under [`Self::MASTER`].
///
/// ```no_run
/// use weir_test_support::redis_server::RedisSentinels;
///
/// # fn demo() -> Result<(), weir_test_support::redis_server::FixtureError> {
/// let Some(mut set) = RedisSentinels::start_or_skip("my test", 1, 3)? else {
///     return Ok(());
/// };
/// let old = set.kill_master()?;
/// let new = set.wait_for_new_master(old, std::time::Duration::from_secs(20))?;
/// assert_ne!(old, new);
/// # Ok(())
/// # }
/// ```
pub struct RedisSentinels {
    /// The first master, then its replicas.
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

/// One `redis-sentinel` process; killed on drop.
struct Sentinel {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisSentinels {
    /// The name the Sentinels monitor the master under.
    pub const MASTER: &'static str = "weir-master";

    /// [`start`](Self::start), or `Ok(None)` to skip when `redis-server`
    /// or `redis-sentinel` is not installed (a failure under `CI=true`).
    pub fn start_or_skip(
        what: &str,
        replicas: usize,
        sentinels: usize,
    ) -> Result<Option<Self>, FixtureError> {
        let installed = super::installed() && runs("redis-sentinel");
        if !skip_unless(
            installed,
            what,
            "redis-server/redis-sentinel",
            "redis-server redis-sentinel redis-tools",
        )? {
            return Ok(None);
        }
        Self::start(replicas, sentinels).map(Some)
    }

    /// A master, `replicas` replicas in sync with it, and `sentinels`
    /// Sentinels (a majority of them must agree to fail over) that all
    /// know every replica.
    pub fn start(replicas: usize, sentinels: usize) -> Result<Self, FixtureError> {
        let master = RedisServer::start()?;
        let of = ["--replicaof", "127.0.0.1", &master.port().to_string()].map(str::to_owned);
        let of: Vec<&str> = of.iter().map(String::as_str).collect();
        let mut servers = vec![master];
        for _ in 0..replicas {
            servers.push(RedisServer::start_with(&of)?);
        }
        let synced = wait_until(Duration::from_secs(20), || {
            servers[1..].iter().all(|r| {
                r.cli(&["INFO", "replication"])
                    .is_ok_and(|i| i.contains("master_link_status:up"))
            })
        });
        if !synced {
            return Err(FixtureError::NotReady("replicas did not sync".into()));
        }
        let quorum = sentinels / 2 + 1;
        let master_port = servers[0].port();
        let mut set = Self {
            servers,
            sentinels: Vec::new(),
        };
        for _ in 0..sentinels {
            set.sentinels.push(Sentinel::start(master_port, quorum)?);
        }
        let known = wait_until(Duration::from_secs(20), || {
            set.sentinels.iter().all(|s| {
                s.cli(&["SENTINEL", "REPLICAS", Self::MASTER])
                    .is_ok_and(|out| {
                        out.lines().filter(|l| l.trim() == "slave").count() >= replicas
                    })
                    && s.cli(&["SENTINEL", "SENTINELS", Self::MASTER])
                        .is_ok_and(|out| {
                            out.lines().filter(|l| l.trim() == "name").count() + 1 >= sentinels
                        })
            })
        });
        if !known {
            return Err(FixtureError::NotReady(
                "the Sentinels did not learn the replicas and each other".into(),
            ));
        }
        Ok(set)
    }

    /// The Sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// The master's port, as the first Sentinel that answers names it.
    pub fn master_port(&self) -> Result<u16, FixtureError> {
        for s in &self.sentinels {
            let Ok(out) = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::MASTER]) else {
                continue;
            };
            if let Some(port) = out.lines().nth(1).and_then(|p| p.trim().parse().ok()) {
                return Ok(port);
            }
        }
        Err(FixtureError::NotReady("no Sentinel names a master".into()))
    }

    /// The master it started with, then the replicas.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The server on `port`, if it is one of the set.
    pub fn server(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.servers.iter_mut().find(|s| s.port() == port)
    }

    /// Kill the master (SIGKILL); returns its port.
    pub fn kill_master(&mut self) -> Result<u16, FixtureError> {
        let port = self.master_port()?;
        let master = self
            .server(port)
            .ok_or_else(|| FixtureError::NotReady(format!("master {port} not in the set")))?;
        master.kill();
        Ok(port)
    }

    /// Wait until the Sentinels name a master other than `old`, a
    /// replica they promoted, and it takes writes; its port.
    pub fn wait_for_new_master(&self, old: u16, limit: Duration) -> Result<u16, FixtureError> {
        let mut new = None;
        let promoted = wait_until(limit, || {
            new = self.master_port().ok().filter(|&p| p != old);
            new.and_then(|p| self.servers.iter().find(|s| s.port() == p))
                .is_some_and(|s| {
                    s.cli(&["INFO", "replication"])
                        .is_ok_and(|i| i.contains("role:master"))
                })
        });
        match new {
            Some(port) if promoted => Ok(port),
            _ => Err(FixtureError::NotReady("no failover in time".into())),
        }
    }

    /// How long the Sentinels wait before they call a master down.
    pub fn down_after(&self) -> Duration {
        Duration::from_millis(DOWN_AFTER_MS)
    }
}

impl Sentinel {
    fn start(master_port: u16, quorum: usize) -> Result<Self, FixtureError> {
        let port = free_port()?;
        let dir = temp_dir("sentinel", port)?;
        let conf = dir.join("sentinel.conf");
        let name = RedisSentinels::MASTER;
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {name} 4000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir = dir.display(),
                log = dir.join("sentinel.log").display(),
            ),
        )?;
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut sentinel = Self {
            child: Some(child),
            port,
            dir,
        };
        let ready = wait_until(Duration::from_secs(10), || {
            sentinel.cli(&["PING"]).is_ok_and(|o| o.trim() == "PONG")
        });
        if !ready {
            sentinel.kill();
            let log =
                std::fs::read_to_string(sentinel.dir.join("sentinel.log")).unwrap_or_default();
            return Err(FixtureError::NotReady(format!(
                "redis-sentinel on port {port} did not start: {}",
                log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            )));
        }
        Ok(sentinel)
    }

    fn cli(&self, args: &[&str]) -> Result<String, FixtureError> {
        super::cli(self.port, args)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
