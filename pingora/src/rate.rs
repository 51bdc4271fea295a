//! [`RateLimit`]: a weir keyed limit in a pingora `ProxyHttp`, checked in
//! `request_filter` and reported in `response_filter`.

use crate::key::RequestKey;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use weir_rate::{CheckKeyAsync, Decision, PolicyName};

/// A rate limit for a pingora proxy: any weir keyed limiter (in process,
/// a sketch, or on a store through [`CheckKeyAsync`]), a [`RequestKey`],
/// and the policy name the IETF `RateLimit-Policy` / `RateLimit` fields
/// carry.
///
/// A refused request gets a 429 with `Retry-After` and the fields, and the
/// connection stays open for the client's next request; an allowed one
/// goes on, and its response gets the fields too
/// ([`response_filter`](Self::response_filter)). A request without a key
/// gets a 500 (it cannot be counted, so it does not pass).
///
/// ```no_run
/// use async_trait::async_trait;
/// use pingora::prelude::*;
/// use pingora::http::ResponseHeader;
/// use pingora::proxy::{ProxyHttp, Session};
/// use weir_pingora::{ClientIp, RateLimit, Passage};
/// use weir_rate::{Gcra, KeyedLimiter, Quota, nonzero};
///
/// struct Proxy {
///     per_ip: RateLimit<KeyedLimiter<String, Gcra>, ClientIp>,
/// }
///
/// #[async_trait]
/// impl ProxyHttp for Proxy {
///     type CTX = Passage;
///     fn new_ctx(&self) -> Passage {
///         Passage::default()
///     }
///     async fn request_filter(&self, session: &mut Session, ctx: &mut Passage) -> Result<bool> {
///         self.per_ip.request_filter(session, ctx).await
///     }
///     async fn response_filter(&self, _: &mut Session, response: &mut ResponseHeader, ctx: &mut Passage) -> Result<()> {
///         self.per_ip.response_filter(response, ctx)
///     }
///     async fn upstream_peer(&self, _: &mut Session, _: &mut Passage) -> Result<Box<HttpPeer>> {
///         Ok(Box::new(HttpPeer::new("127.0.0.1:8080", false, String::new())))
///     }
/// }
///
/// let limiter = KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(10))));
/// let proxy = Proxy { per_ip: RateLimit::new(ClientIp::new(), limiter, "per-ip") };
/// # let _ = proxy;
/// ```
#[derive(Debug)]
pub struct RateLimit<L, K> {
    limiter: L,
    key: K,
    policy: PolicyName,
}

/// What a request's limits decided, kept in its context from
/// `request_filter` to `response_filter`.
#[derive(Debug, Default, Clone)]
pub struct Passage {
    decisions: Vec<(PolicyName, Decision)>,
}

impl Passage {
    /// The decisions made for this request so far, with their policies.
    pub fn decisions(&self) -> impl Iterator<Item = (&PolicyName, &Decision)> {
        self.decisions.iter().map(|(p, d)| (p, d))
    }
}

impl<L: CheckKeyAsync<str>, K: RequestKey> RateLimit<L, K> {
    /// `limiter` keyed by `key`, named `policy` in the RateLimit fields.
    pub fn new(key: K, limiter: L, policy: &str) -> Self {
        Self {
            limiter,
            key,
            policy: PolicyName::new(policy),
        }
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// Check the request: `Ok(false)` lets it go on; `Ok(true)` means a
    /// response was written (429, or 500 for a request without a key) and
    /// `request_filter` must return it.
    ///
    /// # Errors
    ///
    /// The session's error if the refusal could not be written (the client
    /// is gone).
    pub async fn request_filter(
        &self,
        session: &mut Session,
        passage: &mut Passage,
    ) -> Result<bool> {
        let Some(key) = self.key.key(session) else {
            respond(session, 500, &[]).await?;
            return Ok(true);
        };
        let decision = match self.limiter.check_n_async(&key, 1).await {
            Ok(decision) => decision,
            // A cost of one the quota can never allow: a limit of zero.
            Err(_) => {
                respond(session, 429, &[]).await?;
                return Ok(true);
            }
        };
        if decision.is_allowed() {
            passage.decisions.push((self.policy.clone(), decision));
            return Ok(false);
        }
        let mut fields = vec![
            ("RateLimit-Policy", decision.ratelimit_policy(&self.policy)),
            ("RateLimit", decision.ratelimit(&self.policy)),
        ];
        if let Some(retry) = decision.retry_after_header() {
            fields.push(("Retry-After", retry));
        }
        respond(session, 429, &fields).await?;
        Ok(true)
    }

    /// Add the RateLimit fields of every limit the request passed to its
    /// response, one list per field as the IETF draft gives them.
    ///
    /// # Errors
    ///
    /// pingora's error for a field it cannot add (it cannot happen for the
    /// fields weir renders).
    pub fn response_filter(&self, response: &mut ResponseHeader, passage: &Passage) -> Result<()> {
        add_fields(response, passage)
    }
}

/// The RateLimit fields of `passage` on `response`, every policy in one
/// list per field.
fn add_fields(response: &mut ResponseHeader, passage: &Passage) -> Result<()> {
    if passage.decisions.is_empty() {
        return Ok(());
    }
    let join = |f: fn(&Decision, &PolicyName) -> String| {
        passage
            .decisions
            .iter()
            .map(|(p, d)| f(d, p))
            .collect::<Vec<_>>()
            .join(", ")
    };
    response.insert_header("RateLimit-Policy", join(Decision::ratelimit_policy))?;
    response.insert_header("RateLimit", join(Decision::ratelimit))?;
    Ok(())
}

/// Writes a bodiless response of `status` with `fields`, keeping the
/// connection open.
async fn respond(session: &mut Session, status: u16, fields: &[(&str, String)]) -> Result<()> {
    let mut header = ResponseHeader::build(status, Some(fields.len() + 1))?;
    for (name, value) in fields {
        header.insert_header(name.to_string(), value.as_str())?;
    }
    header.insert_header("Content-Length", "0")?;
    session
        .write_response_header(Box::new(header), true)
        .await
        .map_err(|e| Error::because(ErrorType::WriteError, "writing a refusal", e))
}
