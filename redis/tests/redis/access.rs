//! Who may connect: an ACL user allowed only what the store needs, TLS with
//! a private authority and client certificates, and every refusal a
//! configuration error at connect rather than a quiet failure policy.

use super::*;

fn with_login(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@{}/", server.addr())
}

/// Allowed of `n` checks of `key`, all decided by Redis.
async fn allowed_on_redis(
    l: &RedisLimiter,
    key: &str,
    n: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    let mut allowed = 0;
    for _ in 0..n {
        let a = l.check_verbose(key, 1).await?;
        assert_eq!(a.source, Source::Store, "{:?}", a.error);
        allowed += usize::from(a.decision.is_allowed());
    }
    Ok(allowed)
}

/// A user granted exactly the documented commands on the prefix's keys
/// runs every algorithm, all-or-nothing, charges and refunds.
#[test]
fn an_acl_user_with_the_documented_commands_decides_everything() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("acl user")? else {
        return Ok(());
    };
    let prefix = unique_prefix("acl");
    server.add_user("weir", "s3cret", &limiter_acl(&prefix))?;
    rt()?.block_on(async {
        let quota = Quota::per_hour(nz(5));
        let url = with_login(&server, "weir", "s3cret");
        for alg in ALGORITHMS {
            let l = alg
                .builder(quota)
                .prefix(format!("{prefix}:{}", alg_name(alg)))
                .connect(Target::server(url.clone()))
                .await?;
            assert_eq!(allowed_on_redis(&l, "k", 8).await?, 5, "{}", alg_name(alg));
        }
        let both = RedisLimiter::builder(Gcra::new(quota))
            .and(FixedWindow::new(Quota::per_day(nz(3))))
            .prefix(format!("{prefix}:both"))
            .connect(Target::server(url.clone()))
            .await?;
        assert_eq!(allowed_on_redis(&both, "k", 5).await?, 3);
        let receipt = both.charge("k", 1).await?;
        both.refund("k", &receipt).await?;
        Ok(())
    })
}

/// The documented additions: `+role` for a master named by Sentinels
/// (the client asks it whether it is the master before using it).
#[test]
fn an_acl_user_on_a_sentinel_named_master() -> TestResult {
    let Some(set) =
        weir_test_support::redis_server::RedisSentinels::start_or_skip("acl sentinel", 0, 1)?
    else {
        return Ok(());
    };
    let prefix = unique_prefix("aclsentinel");
    let mut rules = limiter_acl(&prefix);
    rules.push("+role".to_owned());
    set.servers()[0].add_user("weir", "s3cret", &rules)?;
    rt()?.block_on(async {
        let target = |password: &str| {
            Target::sentinel(
                set.urls(),
                weir_test_support::redis_server::RedisSentinels::MASTER,
            )
            .master_auth("weir", password)
        };
        let l = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
            .prefix(prefix.clone())
            .connect(target("s3cret"))
            .await?;
        assert_eq!(allowed_on_redis(&l, "k", 8).await?, 5);
        let refused = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
            .prefix(prefix.clone())
            .connect(target("wrong"))
            .await;
        assert!(
            matches!(refused, Err(ConfigError::Rejected(_))),
            "{refused:?}"
        );
        Ok(())
    })
}

/// A wrong password, and a user who may not load the scripts, are refused
/// at connect: no limiter quietly decides by its failure policy forever.
#[test]
fn refused_logins_are_config_errors_at_connect() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("acl refusals")? else {
        return Ok(());
    };
    let prefix = unique_prefix("acl");
    server.add_user("weir", "s3cret", &limiter_acl(&prefix))?;
    let mut no_scripts = limiter_acl(&prefix);
    no_scripts.retain(|r| r != "+script|load");
    server.add_user("reader", "s3cret", &no_scripts)?;
    rt()?.block_on(async {
        for url in [
            with_login(&server, "weir", "wrong"),
            with_login(&server, "nobody", "s3cret"),
            with_login(&server, "reader", "s3cret"),
        ] {
            let connected = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
                .prefix(prefix.clone())
                .connect(Target::server(url.clone()))
                .await;
            assert!(
                matches!(connected, Err(ConfigError::Rejected(_))),
                "{url}: {connected:?}"
            );
        }
        Ok(())
    })
}

/// Users that log in and may load the scripts but not do what they do
/// (a key pattern of another prefix, writes refused, or one command of
/// the documented least user missing) are refused at connect, for a
/// single limit and an all-of set: none of them may connect and leave
/// every decision to the failure policy.
#[test]
fn users_the_scripts_would_be_refused_are_config_errors_at_connect() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("acl least user")? else {
        return Ok(());
    };
    let prefix = unique_prefix("aclleast");
    let full = limiter_acl(&prefix);
    let mut users: Vec<(String, Vec<String>)> = Vec::new();
    // The default pattern, `~weir:*`, while the limiter's prefix is another.
    let mut other_prefix = full.clone();
    other_prefix[1] = "~weir:*".to_owned();
    users.push(("otherprefix".to_owned(), other_prefix));
    let mut read_only = full.clone();
    read_only[1] = format!("%R~{prefix}:*");
    users.push(("readonly".to_owned(), read_only));
    for command in ["+evalsha", "+mget", "+set", "+setrange", "+time"] {
        let mut rules = full.clone();
        rules.retain(|r| r != command);
        users.push((format!("no{}", &command[1..]), rules));
    }
    for (user, rules) in &users {
        server.add_user(user, "s3cret", rules)?;
    }
    rt()?.block_on(async {
        let quota = Quota::per_hour(nz(5));
        for (user, _) in &users {
            let url = with_login(&server, user, "s3cret");
            let single = RedisLimiter::builder(Gcra::new(quota))
                .prefix(prefix.clone())
                .connect(Target::server(url.clone()))
                .await;
            assert!(
                matches!(single, Err(ConfigError::Rejected(_))),
                "{user}: {single:?}"
            );
            let both = RedisLimiter::builder(FixedWindow::new(quota))
                .and(TokenBucket::new(quota))
                .prefix(prefix.clone())
                .connect(Target::server(url))
                .await;
            assert!(
                matches!(both, Err(ConfigError::Rejected(_))),
                "{user}, all-of: {both:?}"
            );
        }
        // A user that does not exist yet is refused too; once it exists
        // with the documented rules it connects, and the probes run by
        // every connect above left nothing a limiter reads: the key the
        // probes are named after (`weir`) has its whole quota.
        let missing = RedisLimiter::builder(Gcra::new(quota))
            .prefix(prefix.clone())
            .connect(Target::server(with_login(&server, "weir", "s3cret")))
            .await;
        assert!(
            matches!(missing, Err(ConfigError::Rejected(_))),
            "no such user: {missing:?}"
        );
        server.add_user("weir", "s3cret", &full)?;
        let l = RedisLimiter::builder(Gcra::new(quota))
            .prefix(prefix.clone())
            .connect(Target::server(with_login(&server, "weir", "s3cret")))
            .await?;
        assert_eq!(allowed_on_redis(&l, "weir", 8).await?, 5);
        Ok(())
    })
}

/// A permission taken away while the limiter serves is a refusal, not an
/// outage: the failure policy answers with a [`StoreError::Refused`]
/// that names the command, and Redis decides again once it is given back.
#[test]
fn a_permission_revoked_while_serving_is_a_refusal() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("acl revoked")? else {
        return Ok(());
    };
    let prefix = unique_prefix("aclrevoked");
    server.add_user("weir", "s3cret", &limiter_acl(&prefix))?;
    rt()?.block_on(async {
        let l = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(100))))
            .prefix(prefix.clone())
            .backoff(Duration::from_millis(20))
            .connect(Target::server(with_login(&server, "weir", "s3cret")))
            .await?;
        assert_eq!(allowed_on_redis(&l, "k", 3).await?, 3);
        for (revoke, restore, missing) in [
            ("-mget", "+mget", "can't run this command"),
            ("-evalsha", "+evalsha", "'evalsha'"),
        ] {
            server.cli(&["ACL", "SETUSER", "weir", revoke])?;
            let a = l.check_verbose("k", 1).await?;
            assert_ne!(a.source, Source::Store);
            match &a.error {
                Some(e @ StoreError::Refused(_)) => {
                    assert!(e.to_string().contains(missing), "{revoke}: {e}")
                }
                other => panic!("{revoke}: not a refusal: {other:?}"),
            }
            server.cli(&["ACL", "SETUSER", "weir", restore])?;
            let mut back = false;
            for _ in 0..250 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if l.check_verbose("k", 1).await?.source == Source::Store {
                    back = true;
                    break;
                }
            }
            assert!(back, "{restore}: Redis never decided again");
        }
        Ok(())
    })
}

/// A plain `redis://` address pointed at a server that speaks only TLS is
/// a configuration error saying TLS is needed, not a quiet outage: the
/// server hangs up on plain text, which on its own looks like a store
/// that is down.
#[test]
fn a_plain_address_at_a_tls_port_is_rejected_as_needing_tls() -> TestResult {
    if !weir_test_support::redis_server::available_or_skip("plain to tls")? {
        return Ok(());
    }
    let authority = weir_test_support::redis_server::CertificateAuthority::new()?;
    let server = RedisServer::start_tls(
        &authority,
        weir_test_support::redis_server::ClientCertificates::Ignored,
    )?;
    let plain = server
        .tls_url()
        .ok_or("no TLS port")?
        .replace("rediss://", "redis://");
    rt()?.block_on(async {
        let connected = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
            .prefix(unique_prefix("plain-tls"))
            .connect(Target::server(plain))
            .await;
        match connected {
            Err(ConfigError::Rejected(e)) => {
                assert!(e.to_string().contains("rediss://"), "{e}");
            }
            other => panic!("expected Rejected, got {:?}", other.map(|_| "a limiter")),
        }
        // The server's plain port, by contrast, decides.
        let l = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
            .prefix(unique_prefix("plain-tls"))
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(allowed_on_redis(&l, "k", 8).await?, 5);
        Ok(())
    })
}

#[cfg(feature = "tls")]
mod tls {
    use super::*;
    use weir_redis::Tls;
    use weir_test_support::redis_server::{CertificateAuthority, ClientCertificates};

    fn trusting(authority: &CertificateAuthority) -> Tls {
        Tls::new().root_certificate(authority.pem().into_bytes())
    }

    async fn connect(url: String, tls: Tls) -> Result<RedisLimiter, ConfigError> {
        RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
            .prefix(unique_prefix("tls"))
            .timeout(Duration::from_secs(1))
            .connect(Target::server(url).tls(tls))
            .await
    }

    /// Over TLS with a private authority: decisions from Redis, exact.
    #[test]
    fn a_tls_server_with_a_private_authority_decides() -> TestResult {
        let Some(()) = available()? else {
            return Ok(());
        };
        let authority = CertificateAuthority::new()?;
        let server = RedisServer::start_tls(&authority, ClientCertificates::Ignored)?;
        let url = server.tls_url().ok_or("no TLS port")?;
        rt()?.block_on(async {
            let l = connect(url, trusting(&authority)).await?;
            assert_eq!(allowed_on_redis(&l, "k", 8).await?, 5);
            Ok(())
        })
    }

    /// A certificate from an authority the client does not trust, and a
    /// server that requires a client certificate the client lacks, are
    /// refusals at connect; with the certificate it decides.
    #[test]
    fn untrusted_and_missing_certificates_are_config_errors() -> TestResult {
        let Some(()) = available()? else {
            return Ok(());
        };
        let authority = CertificateAuthority::new()?;
        let stranger = CertificateAuthority::new()?;
        let open = RedisServer::start_tls(&authority, ClientCertificates::Ignored)?;
        let strict = RedisServer::start_tls(&authority, ClientCertificates::Required)?;
        rt()?.block_on(async {
            let untrusted = connect(open.tls_url().ok_or("tls")?, trusting(&stranger)).await;
            assert!(
                matches!(untrusted, Err(ConfigError::Rejected(_))),
                "{untrusted:?}"
            );
            let strict_url = strict.tls_url().ok_or("tls")?;
            let anonymous = connect(strict_url.clone(), trusting(&authority)).await;
            assert!(
                matches!(anonymous, Err(ConfigError::Rejected(_))),
                "{anonymous:?}"
            );
            let client = authority.issue(&["weir-client"])?;
            let tls = trusting(&authority)
                .client_certificate(client.chain.into_bytes(), client.key.into_bytes());
            let l = connect(strict_url, tls).await?;
            assert_eq!(allowed_on_redis(&l, "k", 8).await?, 5);
            Ok(())
        })
    }

    /// An ACL login over TLS, as managed services require both.
    #[test]
    fn an_acl_login_over_tls() -> TestResult {
        let Some(()) = available()? else {
            return Ok(());
        };
        let authority = CertificateAuthority::new()?;
        let server = RedisServer::start_tls(&authority, ClientCertificates::Ignored)?;
        let prefix = unique_prefix("tlsacl");
        server.add_user("weir", "s3cret", &limiter_acl(&prefix))?;
        let url = server
            .tls_url()
            .ok_or("tls")?
            .replace("rediss://", "rediss://weir:s3cret@");
        rt()?.block_on(async {
            let l = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
                .prefix(prefix)
                .connect(Target::server(url).tls(trusting(&authority)))
                .await?;
            assert_eq!(allowed_on_redis(&l, "k", 8).await?, 5);
            Ok(())
        })
    }

    fn available() -> Result<Option<()>, Box<dyn std::error::Error>> {
        Ok(weir_test_support::redis_server::available_or_skip("redis tls")?.then_some(()))
    }
}

/// Without the `tls` feature, a `rediss://` target says what is missing.
#[cfg(not(feature = "tls"))]
#[test]
fn tls_without_the_feature_is_unsupported() -> TestResult {
    rt()?.block_on(async {
        let connected = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
            .connect(Target::server("rediss://127.0.0.1:1/"))
            .await;
        assert!(
            matches!(connected, Err(ConfigError::Unsupported(_))),
            "{connected:?}"
        );
        Ok(())
    })
}
