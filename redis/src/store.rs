//! [`Redis`]: the Redis store behind a [`RedisLimiter`](crate::RedisLimiter):
//! how a key is named, which keys fail together and share a call, and the
//! script calls that decide, charge and refund.

use crate::call::{Core, Limit as KeyedLimit, Tuned};
use crate::link::misconfigured;
use crate::params::params;
use crate::scripts::{self, Settle};
use crate::slot::cluster_slot;
use crate::target::Target;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use weir_rate::{Decision, Receipt};
use weir_store::{Backend, ConfigError, Kind, Limit, Placement, Plan, StoreError};

/// Back-off cells: one for a single server; for a cluster one per 64
/// consecutive slots, so a dead master only sends its own slots' keys to
/// the failure policy while the other masters keep deciding.
const CLUSTER_CELLS: usize = 256;

/// The Redis store of a [`RedisLimiter`](crate::RedisLimiter): a single
/// server or a Cluster, the limiter's scripts, and how it names keys.
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, Quota};
/// use weir_redis::{RedisLimiter, Target};
///
/// # async fn demo() -> Result<(), weir_redis::ConfigError> {
/// let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(NonZeroU32::MIN)))
///     .prefix("api")
///     .connect(Target::server("redis://127.0.0.1:6379/"))
///     .await?;
/// assert_eq!(limiter.store().redis_keys("u1"), ["api:gcra:{u1}"]);
/// # Ok(())
/// # }
/// ```
pub struct Redis {
    core: Core,
    /// The limits' tags, in order.
    tags: Box<[&'static str]>,
    /// A key's Redis key base is this, the key, then `}`.
    key_head: String,
    target: Target,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("target", &self.target)
            .field("key_head", &self.key_head)
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// The Redis keys holding `key`'s state, one per limit: for a single
    /// limit `{prefix}:{alg}:{<key>}`, for an all-of limiter
    /// `<prefix>:all:{<prefix>:<key>}:<i>:<alg>`.
    pub fn redis_keys(&self, key: &str) -> Vec<String> {
        let base = self.store_key(key);
        if self.tags.len() == 1 {
            return vec![base];
        }
        self.tags
            .iter()
            .enumerate()
            .map(|(i, tag)| format!("{base}:{i}:{tag}"))
            .collect()
    }
}

impl Redis {
    /// `key` as Redis names it: the head, the key, then `}`.
    fn store_key(&self, key: &str) -> String {
        let head = &self.key_head;
        let mut s = String::with_capacity(head.len() + key.len() + 1);
        s.push_str(head);
        s.push_str(key);
        s.push('}');
        s
    }
}

impl Backend for Redis {
    const NAME: &'static str = "redis";
    type Target = Target;
    type Key = String;

    async fn connect(target: Target, plan: &Plan) -> Result<(Self, bool), ConfigError> {
        let prefix = plan.prefix();
        if prefix.contains(['{', '}']) {
            return Err(ConfigError::Invalid("the key prefix contains `{` or `}`"));
        }
        let limits = plan.limits();
        let kinds: Vec<Kind> = limits.iter().map(|l| l.kind()).collect();
        let all_of = limits.len() > 1;
        // One limit keeps the layout it always had, `<prefix>:<alg>:{<key>}`;
        // a set tags the prefix and key together, so its keys share a
        // slot whatever the key (a tag of the key alone is empty, and then
        // each whole key is hashed, for a key starting with `}`). The tag
        // alone would be ambiguous (`{a:b:c}` is the prefix `a` or `a:b`),
        // so the prefix also comes first, ended by the tag's `{`.
        let (source, key_head, keyed) = if all_of {
            let keyed = limits
                .iter()
                .enumerate()
                .map(|(i, l)| KeyedLimit {
                    suffix: format!(":{i}:{}", l.tag()),
                })
                .collect();
            (
                scripts::all_of_check(&kinds),
                format!("{prefix}:all:{{{prefix}:"),
                keyed,
            )
        } else {
            let keyed = vec![KeyedLimit {
                suffix: String::new(),
            }];
            (
                scripts::check(kinds[0]),
                format!("{prefix}:{}:{{", limits[0].tag()),
                keyed,
            )
        };
        let timeout = plan.timeout();
        let link = target.link(timeout)?;
        let core = Core::new(
            Arc::clone(&link),
            (&source, &scripts::settle(&kinds)),
            tuned(limits),
            keyed,
            (timeout, target.is_cluster()),
        );
        // Connect now if Redis is there; if it is not (no listener, or no
        // answer within the timeout, at least a second), start all the
        // same and let the back-off's probes connect later: a service
        // restarted during a Redis incident must come up, limited by its
        // failure policy meanwhile. A server that answers and refuses this
        // client (credentials, permissions, certificates) is a
        // configuration error: no probe would ever get past it.
        let connect_timeout = timeout.max(Duration::from_secs(1));
        let probe_base = format!("{key_head}weir}}");
        let connected = match tokio::time::timeout(connect_timeout, core.connect(&probe_base)).await
        {
            Ok(Ok(())) => true,
            // The Sentinels name no master: a name they do not know is a
            // configuration error, but a known master that is down (a
            // failover under way, no replica to promote) is an outage.
            Ok(Err(e)) if e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel => {
                match link.sentinels_know_master(connect_timeout).await {
                    Some(false) => return Err(ConfigError::Target(Arc::new(e))),
                    _ => false,
                }
            }
            Ok(Err(e)) => match misconfigured(e) {
                Ok(config) => return Err(config),
                // A server that hangs up on a plain client may be one that
                // speaks only TLS, which no probe would ever get past.
                Err(outage) if outage.is_io_error() || outage.is_connection_dropped() => {
                    match link.plain_address_speaking_tls(connect_timeout).await {
                        Some(address) => return Err(needs_tls(&address)),
                        None => false,
                    }
                }
                Err(_outage) => false,
            },
            Err(_) => false,
        };
        let redis = Redis {
            core,
            tags: limits.iter().map(|l| l.tag()).collect(),
            key_head,
            target,
        };
        Ok((redis, connected))
    }

    /// In Cluster mode, one back-off cell per 64 slots, and one group per
    /// slot (a script may only touch keys of one slot).
    fn place(&self, key: &str) -> Placement<String> {
        let key = self.store_key(key);
        if !self.core.cluster {
            return Placement::alone(key);
        }
        let slot = cluster_slot(&key);
        Placement {
            cell: usize::from(slot) * CLUSTER_CELLS / 16384,
            group: u64::from(slot),
            key,
        }
    }

    fn cells(&self) -> usize {
        if self.core.cluster { CLUSTER_CELLS } else { 1 }
    }

    /// The scripts take every parameter per call: the next call decides
    /// by the new limits, on the same keys (the limiter has checked that
    /// the algorithms, their order and the windows' lengths are the same).
    fn retune(&self, limits: &[Limit]) -> Result<(), ConfigError> {
        self.core.retune(tuned(limits));
        Ok(())
    }

    fn describe(&self, cell: usize) -> String {
        self.target
            .describe(self.core.cluster.then_some(cell * 16384 / CLUSTER_CELLS))
    }

    async fn decide(
        &self,
        keys: &[String],
        costs: &[u32],
    ) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let decisions = self.core.query(&keys, costs).await?;
        Ok(decisions.into_iter().map(Ok).collect())
    }

    async fn charge(&self, key: &String, cost: u32) -> Result<Receipt, StoreError> {
        let now_us = self.core.settle(key, (Settle::Charge, cost, 0)).await?;
        Ok(Receipt::remote(now_us.saturating_mul(1000), cost))
    }

    async fn refund(&self, key: &String, receipt: Receipt) -> Result<(), StoreError> {
        let at_us = receipt.at_nanos() / 1000;
        self.core
            .settle(key, (Settle::Refund, receipt.cost(), at_us))
            .await
            .map(|_| ())
    }
}

/// The configuration error for a plain address whose server speaks only
/// TLS.
fn needs_tls(address: &str) -> ConfigError {
    ConfigError::Rejected(Arc::new(std::io::Error::other(format!(
        "the server at {address} speaks only TLS: give a `rediss://` address \
         (weir-redis's `tls` feature)"
    ))))
}

/// What the calls take from `limits`: the scripts' parameters, limit by
/// limit, and the quotas the decisions report.
fn tuned(limits: &[Limit]) -> Tuned {
    Tuned {
        params: limits.iter().flat_map(params).collect(),
        quotas: limits.iter().map(Limit::quota).collect(),
    }
}
