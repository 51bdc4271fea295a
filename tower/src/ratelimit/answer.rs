//! How a [`RateLimitLayer`](super::RateLimitLayer) turns a limiter's
//! answer into a response or the headers of one.

use super::super::response::{Unkeyed, refusal};
use crate::telemetry::Outcome;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use std::sync::{Arc, OnceLock};
use weir_rate::PolicyName;
use weir_rate::{Decision, NeverAllowed};

/// A quota's `(limit, window)` and its rendered `RateLimit-Policy` value.
type PolicyHeader = ((u32, std::time::Duration), HeaderValue);

/// How the layer turns a limiter's answer into a response: everything the
/// ready path and the waiting path share.
#[derive(Debug, Clone)]
pub(super) struct Answering {
    pub(super) policy: Arc<str>,
    /// The policy name quoted once, for the per-response `RateLimit` field.
    pub(super) quoted: Arc<PolicyName>,
    /// The `RateLimit-Policy` value of the first quota seen (services are
    /// cloned per request by some routers, so it lives here, shared).
    pub(super) policy_header: Arc<OnceLock<PolicyHeader>>,
    pub(super) denied_status: StatusCode,
    pub(super) shadow: bool,
    pub(super) unkeyed: Unkeyed,
    /// Decisions by outcome (feature `metrics`), shared by every clone.
    pub(super) decisions: Arc<crate::telemetry::Decisions>,
}

/// What to do with a request once the limiter has answered.
pub(super) enum Next<B> {
    /// Answer it without calling the inner service.
    Answer(Response<B>),
    /// Call the inner service and put these headers on its response.
    Forward(DecisionHeaders),
}

impl Answering {
    /// The `RateLimit-Policy` value for this decision's quota, formatted
    /// once per quota rather than per request.
    pub(super) fn policy_header(&self, decision: &Decision) -> Option<HeaderValue> {
        let quota = (decision.limit(), decision.window());
        // Read-only after the first request, so cores share the line
        // without bouncing it; a quota changed at run time is formatted
        // per request (correct, just slower).
        if let Some((cached, value)) = self.policy_header.get()
            && *cached == quota
        {
            return Some(value.clone());
        }
        let value = HeaderValue::from_str(&decision.ratelimit_policy(&self.quoted)).ok()?;
        let _ = self.policy_header.set((quota, value.clone()));
        Some(value)
    }

    /// How long an admitted request waits before it is forwarded: a
    /// shaper's delay, except in shadow mode, which holds nothing back. A
    /// denial waits for nothing, whatever delay a shaper combined into it
    /// (an all-of limit) carried.
    pub(super) fn delay(&self, decision: Option<&Decision>) -> std::time::Duration {
        match decision {
            Some(decision) if decision.is_allowed() && !self.shadow => decision.delay(),
            _ => std::time::Duration::ZERO,
        }
    }

    pub(super) fn count(&self, outcome: Outcome) {
        self.decisions.count(&self.policy, outcome);
    }

    pub(super) fn next<B: Default>(&self, outcome: Result<Decision, NeverAllowed>) -> Next<B> {
        match outcome {
            Err(_) if self.shadow => {
                self.count(Outcome::ShadowOverLimit);
                Next::Forward(DecisionHeaders {
                    policy: None,
                    ratelimit: None,
                    retry_after: None,
                    shadow_denied: true,
                })
            }
            Err(never) => {
                self.count(Outcome::Error);
                Next::Answer(never_allowed(never, self.denied_status))
            }
            Ok(decision) => {
                let headers = match decision.policy() {
                    // A key under no limit: nothing to describe.
                    Some(_) if decision.is_unlimited() => DecisionHeaders::none(),
                    // A key's tier: its own name in the fields.
                    Some(tier) => {
                        let quoted = PolicyName::new(tier);
                        let policy = HeaderValue::try_from(decision.ratelimit_policy(&quoted)).ok();
                        DecisionHeaders::new(&decision, &quoted, policy, self.shadow)
                    }
                    None => {
                        let policy = self.policy_header(&decision);
                        DecisionHeaders::new(&decision, &self.quoted, policy, self.shadow)
                    }
                };
                let outcome = if headers.shadow_denied {
                    Outcome::ShadowOverLimit
                } else if decision.is_allowed() {
                    Outcome::Ok
                } else {
                    Outcome::OverLimit
                };
                match decision.policy() {
                    Some(tier) => self.decisions.count_as(tier, outcome),
                    None => self.count(outcome),
                }
                if !decision.is_allowed() && !self.shadow {
                    let mut response = refusal(self.denied_status);
                    headers.apply(&mut response);
                    return Next::Answer(response);
                }
                Next::Forward(headers)
            }
        }
    }
}

/// The headers a decision puts on a response.
#[derive(Debug, Clone)]
pub(super) struct DecisionHeaders {
    policy: Option<HeaderValue>,
    ratelimit: Option<HeaderValue>,
    retry_after: Option<HeaderValue>,
    shadow_denied: bool,
}

impl DecisionHeaders {
    /// No fields: a key under no limit.
    fn none() -> Self {
        Self {
            policy: None,
            ratelimit: None,
            retry_after: None,
            shadow_denied: false,
        }
    }

    /// `shadow` is the layer's mode: a denial it lets through is a shadow
    /// denial, and so is an admission a shadowed limiter marks
    /// non-conforming. A denial the layer enforces is not.
    pub(super) fn new(
        decision: &Decision,
        policy_name: &PolicyName,
        policy: Option<HeaderValue>,
        shadow: bool,
    ) -> Self {
        let let_through = decision.is_allowed() || shadow;
        let would_deny = !decision.is_allowed() || !decision.is_conforming();
        Self {
            policy,
            // From a String: the header takes the buffer without copying.
            ratelimit: HeaderValue::try_from(decision.ratelimit(policy_name)).ok(),
            // Only on this layer's own refusal: a response let through
            // keeps whatever `Retry-After` the origin gave it.
            retry_after: (!let_through)
                .then(|| decision.retry_after_header())
                .flatten()
                .and_then(|v| HeaderValue::from_str(&v).ok()),
            shadow_denied: let_through && would_deny,
        }
    }

    /// Both fields are lists: a layer adds its policy beside those of
    /// layers inside it (or the origin's), never over them.
    pub(super) fn apply<B>(self, response: &mut Response<B>) {
        let headers = response.headers_mut();
        if let Some(v) = self.policy {
            headers.append(HeaderName::from_static("ratelimit-policy"), v);
        }
        if let Some(v) = self.ratelimit {
            headers.append(HeaderName::from_static("ratelimit"), v);
        }
        if let Some(v) = self.retry_after {
            headers.insert(http::header::RETRY_AFTER, v);
        }
        if self.shadow_denied {
            mark_shadow(response);
        }
    }
}

pub(super) fn mark_shadow<B>(response: &mut Response<B>) {
    response
        .headers_mut()
        .insert("x-ratelimit-shadow", HeaderValue::from_static("denied"));
}

/// A cost the limiter can never allow: retrying will not help, so no
/// `Retry-After`; the body is empty and the reason is in a header.
pub(super) fn never_allowed<B: Default>(never: NeverAllowed, status: StatusCode) -> Response<B> {
    let mut response = refusal(status);
    if let Ok(value) = HeaderValue::from_str(&never.to_string()) {
        response.headers_mut().insert("x-ratelimit-error", value);
    }
    response
}
