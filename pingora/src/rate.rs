//! [`RateLimit`]: a weir keyed limit in a pingora `ProxyHttp`, checked in
//! `request_filter` and reported in `response_filter`.

use crate::key::RequestKey;
use crate::settle::{Owed, Settle, settle};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use weir_rate::{CheckKeyAsync, Decision, PolicyName, SettleKey};

/// A rate limit for a pingora proxy: any weir keyed limiter (in process,
/// a sketch, or on a store through [`CheckKeyAsync`]), a [`RequestKey`],
/// and the policy name the IETF `RateLimit-Policy` / `RateLimit` fields
/// carry.
///
/// A refused request gets a 429 with `Retry-After` and the fields, and the
/// connection stays open for the client's next request; an allowed one
/// goes on, and its response gets the fields too
/// ([`response_filter`](Self::response_filter)). A request without a key
/// gets a 500 (it cannot be counted, so it does not pass). With a
/// [`Settle`] rule ([`settle`](Self::settle)), what the request turned
/// out to cost is settled in [`logging`](Self::logging).
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
    /// Which of the request's admissions are this limit's.
    id: u64,
    settle: Option<Settle>,
}

/// What a request's limits decided, kept in its context from
/// `request_filter` to `logging`.
#[derive(Debug, Default, Clone)]
pub struct Passage {
    admissions: Vec<Admission>,
    /// A weir limit refused the request.
    refused: bool,
}

/// One limit's admission of the request.
#[derive(Debug, Clone)]
struct Admission {
    limit: u64,
    policy: PolicyName,
    decision: Decision,
    /// Kept only by a limit that settles.
    owed: Option<Owed>,
}

impl Passage {
    /// The decisions that admitted this request so far, with their
    /// policies.
    pub fn decisions(&self) -> impl Iterator<Item = (&PolicyName, &Decision)> {
        self.admissions.iter().map(|a| (&a.policy, &a.decision))
    }
}

/// A settling limit's admission dropped unsettled means `logging` was
/// never called for it: the key keeps what its check charged (a limit of
/// bytes would count requests). Said once per process, loudly.
impl Drop for Passage {
    fn drop(&mut self) {
        static TOLD: AtomicBool = AtomicBool::new(false);
        if self.admissions.iter().any(|a| a.owed.is_some()) && !TOLD.swap(true, Ordering::Relaxed) {
            log::error!(
                "weir-pingora: a RateLimit with a Settle rule admitted a request whose settlement never ran: call its `logging` from your ProxyHttp's `logging`"
            );
        }
    }
}

/// Tells one `RateLimit`'s admissions from another's in a shared passage.
static NEXT_LIMIT: AtomicU64 = AtomicU64::new(0);

impl<L: CheckKeyAsync<str>, K: RequestKey> RateLimit<L, K> {
    /// `limiter` keyed by `key`, named `policy` in the RateLimit fields.
    pub fn new(key: K, limiter: L, policy: &str) -> Self {
        Self {
            limiter,
            key,
            policy: PolicyName::new(policy),
            id: NEXT_LIMIT.fetch_add(1, Ordering::Relaxed),
            settle: None,
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
                passage.refused = true;
                respond(session, 429, &[]).await?;
                return Ok(true);
            }
        };
        // A limiter that names each key's policy (a tier) names it here.
        let policy = decision
            .policy()
            .map_or_else(|| self.policy.clone(), PolicyName::new);
        if decision.is_allowed() {
            let owed = self.settle.as_ref().map(|_| Owed {
                key,
                checked: 1,
                answered: false,
                kept: None,
            });
            passage.admissions.push(Admission {
                limit: self.id,
                policy,
                decision,
                owed,
            });
            return Ok(false);
        }
        passage.refused = true;
        let mut fields = vec![
            ("RateLimit-Policy", decision.ratelimit_policy(&policy)),
            ("RateLimit", decision.ratelimit(&policy)),
        ];
        if let Some(retry) = decision.retry_after_header() {
            fields.push(("Retry-After", retry));
        }
        respond(session, 429, &fields).await?;
        Ok(true)
    }

    /// Add the RateLimit fields of every limit the request passed to its
    /// response, one list per field as the IETF draft gives them, and
    /// note the response head for a settlement (the header a
    /// [`Settle::keeping`] rule reads, before any filter removes it).
    ///
    /// # Errors
    ///
    /// pingora's error for a field it cannot add (it cannot happen for the
    /// fields weir renders).
    pub fn response_filter(
        &self,
        response: &mut ResponseHeader,
        passage: &mut Passage,
    ) -> Result<()> {
        if let Some(rule) = &self.settle {
            let kept = rule
                .kept_header()
                .and_then(|name| response.headers.get(name))
                .and_then(|value| value.to_str().ok());
            if let Some(owed) = self.owed(passage) {
                owed.answered = true;
                owed.kept = kept.map(str::to_owned);
            }
        }
        add_fields(response, passage)
    }

    fn owed<'p>(&self, passage: &'p mut Passage) -> Option<&'p mut Owed> {
        passage
            .admissions
            .iter_mut()
            .find(|a| a.limit == self.id)?
            .owed
            .as_mut()
    }
}

impl<L: SettleKey<str>, K: RequestKey> RateLimit<L, K> {
    /// Settle each admitted request at the cost `rule` finds in its
    /// response, when [`logging`](Self::logging) is called for it. Call
    /// it from your `ProxyHttp::logging` for every request: an admission
    /// never settled keeps what its check charged (and is reported once
    /// as an error in the log).
    ///
    /// ```
    /// use weir_pingora::{ClientIp, RateLimit, Settle};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota, nonzero};
    ///
    /// // A mebibyte a second per client, charged by the bytes sent.
    /// let bytes = KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(1 << 20))));
    /// let download = RateLimit::new(ClientIp::new(), bytes, "bytes").settle(Settle::body_bytes());
    /// # let _ = download;
    /// ```
    #[must_use]
    pub fn settle(mut self, rule: Settle) -> Self {
        self.settle = Some(rule);
        self
    }

    /// Settle the request's admission by this limit (if it settles), from
    /// `logging`'s session and error: the surplus of its check refunded,
    /// the shortfall charged. Each admission settles once; a second call
    /// does nothing.
    pub fn logging(&self, session: &Session, error: Option<&Error>, passage: &mut Passage) {
        let Some(rule) = &self.settle else { return };
        let stopped_after = passage.refused;
        let Some(admission) = passage.admissions.iter_mut().find(|a| a.limit == self.id) else {
            return;
        };
        if let Some(owed) = admission.owed.take() {
            settle(
                &self.limiter,
                rule,
                (&admission.decision, &owed),
                session,
                error,
                stopped_after,
            );
        }
    }
}

/// The RateLimit fields of `passage` on `response`, every policy in one
/// list per field.
fn add_fields(response: &mut ResponseHeader, passage: &Passage) -> Result<()> {
    let (policy, remaining) = match passage.admissions.as_slice() {
        [] => return Ok(()),
        // A key under no limit (an unlimited tier) has no fields.
        [one] if one.decision.is_unlimited() => return Ok(()),
        // One limit, the common case: its fields as rendered.
        [one] => (
            one.decision.ratelimit_policy(&one.policy),
            one.decision.ratelimit(&one.policy),
        ),
        many => {
            let limited = || many.iter().filter(|a| !a.decision.is_unlimited());
            if limited().next().is_none() {
                return Ok(());
            }
            let join = |f: fn(&Decision, &PolicyName) -> String| {
                let items: Vec<String> = limited().map(|a| f(&a.decision, &a.policy)).collect();
                items.join(", ")
            };
            (join(Decision::ratelimit_policy), join(Decision::ratelimit))
        }
    };
    response.insert_header("RateLimit-Policy", policy)?;
    response.insert_header("RateLimit", remaining)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use weir_rate::{Gcra, KeyedLimiter, Quota, nonzero};

    fn admitted(limit: u64, policy: &str, per_minute: std::num::NonZeroU32) -> Admission {
        let limiter = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_minute(per_minute)));
        Admission {
            limit,
            policy: PolicyName::new(policy),
            decision: limiter.check_n("k", 1).unwrap(),
            owed: None,
        }
    }

    #[test]
    fn the_fields_of_every_limit_passed_are_one_list_each() {
        let mut passage = Passage::default();
        let mut response = ResponseHeader::build(200, None).unwrap();
        add_fields(&mut response, &passage).unwrap();
        assert!(
            response.headers.get("ratelimit").is_none(),
            "no limit, no fields"
        );

        passage.admissions.push(admitted(0, "a", nonzero!(10)));
        add_fields(&mut response, &passage).unwrap();
        assert_eq!(response.headers["ratelimit-policy"], "\"a\";q=10;w=60");

        passage.admissions.push(admitted(1, "b", nonzero!(5)));
        add_fields(&mut response, &passage).unwrap();
        assert_eq!(
            response.headers["ratelimit-policy"],
            "\"a\";q=10;w=60, \"b\";q=5;w=60"
        );
        let remaining = response.headers["ratelimit"].to_str().unwrap();
        assert!(
            remaining.starts_with("\"a\";r=9;") && remaining.contains(", \"b\";r=4;"),
            "{remaining}"
        );
        assert_eq!(response.headers.get_all("ratelimit").iter().count(), 1);
    }
}
