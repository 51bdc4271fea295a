//! The Redis backend while a Cluster slot is being migrated: a batch whose
//! keys are split between the two masters of a moving slot is decided key
//! by key, not handed to the failure policy whole.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;
use support::*;
use weir_rate::redis::{Batching, FailurePolicy, RedisLimiter, Source, Target, cluster_slot};
use weir_rate::{Gcra, Quota};
use weir_test_support::redis_server::RedisCluster;

fn rt() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Two limiter keys that share a Cluster slot.
fn two_keys_in_one_slot() -> (String, String, u16) {
    let first = "user0".to_owned();
    let slot = cluster_slot(&first);
    let second = (1..)
        .map(|i| format!("user{i}"))
        .find(|k| cluster_slot(k) == slot)
        .unwrap_or_default();
    (first, second, slot)
}

#[test]
fn a_batch_split_by_a_moving_slot_is_decided_key_by_key() -> TestResult {
    let Some(mut cluster) = RedisCluster::start_or_skip("resharding", 3, 0)? else {
        return Ok(());
    };
    let (moved, stayed, slot) = two_keys_in_one_slot();
    let rt = rt()?;
    let limiter = rt.block_on(
        RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(100))))
            .prefix(unique_prefix("reshard"))
            .batching(Batching::default())
            .on_failure(FailurePolicy::Closed)
            .connect(Target::cluster(cluster.urls())),
    )?;
    // Both keys exist on the slot's master.
    for key in [&moved, &stayed] {
        let v = rt.block_on(limiter.check_verbose(key, 1))?;
        assert_eq!(v.source, Source::Redis, "{:?}", v.error);
    }
    // Start moving the slot to another master, and move one key's state.
    let from = cluster.master_of(slot)?;
    let to = (from + 1) % cluster.nodes.len();
    let topology = cluster.topology()?;
    let id_of = |port: u16| {
        topology
            .iter()
            .find(|n| n.port == port)
            .map(|n| n.id.clone())
            .unwrap_or_default()
    };
    let (from_id, to_id) = (
        id_of(cluster.nodes[from].port()),
        id_of(cluster.nodes[to].port()),
    );
    let slot_arg = slot.to_string();
    let out = cluster.nodes[to].cli(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id])?;
    assert!(out.contains("OK"), "importing: {out}");
    let out = cluster.nodes[from].cli(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id])?;
    assert!(out.contains("OK"), "migrating: {out}");
    let key_of_moved = limiter.redis_key(&moved);
    let to_port = cluster.nodes[to].port().to_string();
    let out =
        cluster.nodes[from].cli(&["MIGRATE", "127.0.0.1", &to_port, &key_of_moved, "0", "5000"])?;
    assert!(out.contains("OK"), "migrate: {out}");

    // One batch for both keys (one slot): a two-key script on the old
    // master meets a missing key in a migrating slot.
    let (a, b) = rt.block_on(async {
        tokio::join!(
            limiter.check_verbose(&moved, 1),
            limiter.check_verbose(&stayed, 1)
        )
    });
    let (a, b) = (a?, b?);
    assert_eq!(a.source, Source::Redis, "moved key: {:?}", a.error);
    assert_eq!(b.source, Source::Redis, "staying key: {:?}", b.error);
    // Each was charged where it lives: its second unit of a hundred.
    assert_eq!(a.decision.remaining(), 98);
    assert_eq!(b.decision.remaining(), 98);
    assert!(!limiter.is_backing_off(&stayed));
    // Finish the move so the cluster is left consistent.
    for node in &cluster.nodes {
        let _ = node.cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
    }
    let v = rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        limiter.check_verbose(&stayed, 1).await
    })?;
    assert_ne!(v.source, Source::FailOpen);
    Ok(())
}
