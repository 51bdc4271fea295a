//! [`RedisCluster`]: private servers joined into a Redis Cluster.

use super::*;
use std::time::Instant;

/// A Redis Cluster of private servers: `masters` masters with `replicas`
/// replicas each, slots spread evenly by `redis-cli --cluster create`.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, in creation order (masters first, as `redis-cli` picks
    /// them).
    pub nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node id.
    pub id: String,
    /// Port.
    pub port: u16,
    /// Whether it is a master (and not failed).
    pub master: bool,
    /// Whether it is flagged failed.
    pub failed: bool,
    /// For a replica, its master's id.
    pub master_id: Option<String>,
    /// Slot ranges served, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Start and join a cluster, or `Ok(None)` to skip (see the module docs).
    pub fn start_or_skip(
        what: &str,
        masters: usize,
        replicas: usize,
    ) -> Result<Option<Self>, FixtureError> {
        if !available_or_skip(what)? {
            return Ok(None);
        }
        Self::start(masters, replicas).map(Some)
    }

    /// Start `masters × (1 + replicas)` servers and join them.
    pub fn start(masters: usize, replicas: usize) -> Result<Self, FixtureError> {
        let n = masters * (1 + replicas);
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-replica-validity-factor",
                "0",
            ])?);
        }
        let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(FixtureError::NotReady(format!(
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&out.stdout)
            )));
        }
        let cluster = Self { nodes };
        let ok = wait_until(Duration::from_secs(30), || {
            cluster.nodes.iter().all(|n| {
                n.cli(&["CLUSTER", "INFO"]).is_ok_and(|s| {
                    s.contains("cluster_state:ok") && s.contains("cluster_slots_ok:16384")
                })
            }) && cluster.replicas_synced(masters * replicas)
        });
        if !ok {
            return Err(FixtureError::NotReady("cluster state not ok".into()));
        }
        Ok(cluster)
    }

    fn replicas_synced(&self, want: usize) -> bool {
        let synced = self
            .nodes
            .iter()
            .filter(|n| {
                n.cli(&["INFO", "replication"])
                    .is_ok_and(|s| s.contains("role:slave") && s.contains("master_link_status:up"))
            })
            .count();
        synced >= want
    }

    /// `redis://` URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `CLUSTER NODES` as seen by the first running node.
    pub fn topology(&mut self) -> Result<Vec<NodeInfo>, FixtureError> {
        let mut text = None;
        for node in &mut self.nodes {
            if node.is_running() {
                text = Some(node.cli(&["CLUSTER", "NODES"])?);
                break;
            }
        }
        let text = text.ok_or_else(|| FixtureError::NotReady("no node running".into()))?;
        Ok(text.lines().filter_map(parse_node).collect())
    }

    /// The index in [`nodes`](Self::nodes) of the master serving `slot`.
    pub fn master_of(&mut self, slot: u16) -> Result<usize, FixtureError> {
        let topo = self.topology()?;
        let port = topo
            .iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|n| n.port)
            .ok_or_else(|| FixtureError::NotReady(format!("no master for slot {slot}")))?;
        self.index_of(port)
    }

    /// The index of a replica of the master at index `master`.
    pub fn replica_of(&mut self, master: usize) -> Result<usize, FixtureError> {
        let topo = self.topology()?;
        let port = self.nodes[master].port;
        let id = topo
            .iter()
            .find(|n| n.port == port)
            .map(|n| n.id.clone())
            .ok_or_else(|| FixtureError::NotReady("master not in CLUSTER NODES".into()))?;
        let rport = topo
            .iter()
            .find(|n| n.master_id.as_deref() == Some(&id) && !n.failed)
            .map(|n| n.port)
            .ok_or_else(|| FixtureError::NotReady("master has no replica".into()))?;
        self.index_of(rport)
    }

    fn index_of(&self, port: u16) -> Result<usize, FixtureError> {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .ok_or_else(|| FixtureError::NotReady(format!("unknown port {port}")))
    }

    /// Start moving `slot` from its master to the next one in
    /// [`nodes`](Self::nodes) (`IMPORTING` on the target, then `MIGRATING`
    /// on the source), moving no key yet. Returns the indices of the source
    /// and the target.
    pub fn start_migrating(&mut self, slot: u16) -> Result<(usize, usize), FixtureError> {
        let from = self.master_of(slot)?;
        let to = (from + 1) % self.nodes.len();
        let topology = self.topology()?;
        let id_of = |index: usize| {
            let port = self.nodes[index].port;
            let node = topology.iter().find(|n| n.port == port);
            node.map(|n| n.id.clone())
                .ok_or_else(|| FixtureError::NotReady(format!("port {port} not in CLUSTER NODES")))
        };
        let (from_id, to_id) = (id_of(from)?, id_of(to)?);
        let slot = slot.to_string();
        for (node, state, id) in [(to, "IMPORTING", &from_id), (from, "MIGRATING", &to_id)] {
            let out = self.nodes[node].cli(&["CLUSTER", "SETSLOT", &slot, state, id])?;
            if !out.contains("OK") {
                return Err(FixtureError::NotReady(format!("SETSLOT {state}: {out}")));
            }
        }
        Ok((from, to))
    }

    /// Give `slot` to the master at index `to` on every node, ending a
    /// migration [`start_migrating`](Self::start_migrating) began (errors
    /// from nodes that are down are ignored).
    pub fn finish_migrating(&mut self, slot: u16, to: usize) -> Result<(), FixtureError> {
        let port = self.nodes[to].port;
        let id = self
            .topology()?
            .into_iter()
            .find(|n| n.port == port)
            .map(|n| n.id)
            .ok_or_else(|| FixtureError::NotReady(format!("port {port} not in CLUSTER NODES")))?;
        let slot = slot.to_string();
        // The importing node first, as Redis's own resharding does: were
        // the source told first, it would send callers on (`MOVED`) to a
        // node that does not yet own the slot and sends them back.
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by_key(|&i| i != to);
        for i in order {
            let _ = self.nodes[i].cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &id]);
        }
        Ok(())
    }

    /// Kill the master at index `master`, then wait (up to 20 s) until a
    /// replica has taken over its slots and the cluster is `ok` again,
    /// forcing the takeover with `CLUSTER FAILOVER TAKEOVER` if the
    /// automatic election is slow. Returns the new master's index.
    pub fn kill_master_and_promote(&mut self, master: usize) -> Result<usize, FixtureError> {
        let replica = self.replica_of(master)?;
        self.nodes[master].kill();
        let start = Instant::now();
        let mut forced = false;
        loop {
            let info = self.nodes[replica].cli(&["INFO", "replication"])?;
            let state = self.nodes[replica].cli(&["CLUSTER", "INFO"])?;
            if info.contains("role:master") && state.contains("cluster_state:ok") {
                return Ok(replica);
            }
            if !forced && start.elapsed() > Duration::from_secs(6) {
                self.nodes[replica].cli(&["CLUSTER", "FAILOVER", "TAKEOVER"])?;
                forced = true;
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err(FixtureError::NotReady("replica not promoted".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn parse_node(line: &str) -> Option<NodeInfo> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 8 {
        return None;
    }
    let addr = f[1].split('@').next()?;
    let port = addr.rsplit(':').next()?.parse().ok()?;
    let flags = f[2];
    let failed = flags.contains("fail") && !flags.contains("fail?");
    let slots = f[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|x| (x, x)),
        })
        .collect();
    Some(NodeInfo {
        id: f[0].to_owned(),
        port,
        master: flags.contains("master") && !failed,
        failed,
        master_id: (f[3] != "-").then(|| f[3].to_owned()),
        slots,
    })
}
