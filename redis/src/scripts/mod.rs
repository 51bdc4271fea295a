//! The Lua scripts, one per algorithm, built from one skeleton.
//!
//! Every script has the same shape, so that one script decides one key
//! (the plain path) or many keys (the batched path):
//!
//! * `KEYS[i]` — the Redis key of the i-th decision (one Redis key per
//!   limiter key, so a decision never touches a key that is not in `KEYS`);
//!   decisions on the same key must be adjacent (the batcher sorts them,
//!   stably, so they are still decided in arrival order);
//! * `ARGV[1..P]` — the algorithm's parameters, shared by the whole call;
//! * `ARGV[P + i]` — the cost of the i-th decision, or `ARGV[P + 1]` alone:
//!   the cost of every decision (the client sends one when all are equal,
//!   the usual case, sparing Redis an argument and a number to parse per
//!   decision).
//!
//! The reply is one string of fixed-size records, one per decision (see
//! [`SKELETON`] and [`decode`]). Time is the server's `TIME`, read once per
//! call; since Redis 5 scripts replicate their effects, so reading the
//! clock inside a script is allowed and replicas see the resulting writes,
//! not a second clock reading.
//!
//! # Cost per decision
//!
//! Redis runs scripts on its one thread, shared by every instance of the
//! service, so the scripts are written for the server's work per key.
//! Timings on a shared VM move by a third between identical runs; the
//! instructions Redis executes do not, so that is what the scripts are
//! tuned by: `cargo run --release -p weir-bench-suite --example
//! redis_instructions` counts them under callgrind for each script at 1,
//! 16 and 50 decisions a call, for new and busy keys (the report has the
//! same table). A call's own work (reading the request, setting up the
//! script, the reply) is most of a plain call's cost and shared by a
//! batch; what remains per decision is the read (`MGET`), the write, the
//! decision and its reply record. Hence:
//!
//! * one `MGET` (in chunks) reads every key of a call;
//! * state is stored as packed doubles (`struct.pack`, 8 bytes a number)
//!   rather than formatted text (parsing and formatting text cost the
//!   first scripts most); a time is two of them, a whole second and the
//!   nanoseconds from it (see [`GCRA`]), since one double of epoch
//!   microseconds is only 0.25 µs fine;
//! * a key's state lives in Lua locals from its read through its adjacent
//!   decisions to its write — no table, no function call per key — and is
//!   written once, only if a decision changed it;
//! * the expiry is a whole-second deadline known from the state (stored
//!   in it by the rate algorithms; for the window algorithms, the current
//!   window's, computed once per call); while it stays put, a busy key is
//!   overwritten in place with `SETRANGE`, which keeps the expiry and costs
//!   Redis less than `SET … KEEPTTL` (the report's "one step inside a
//!   script" table), and whole seconds are taken with `%` rather than
//!   `math.floor`;
//! * equal costs travel as one argument;
//! * the answers go back as packed doubles, rounded by the client.

mod bodies;
mod generated;

use bodies::{FIXED_WINDOW, GCRA, SLIDING_WINDOW, TOKEN_BUCKET};
pub(crate) use generated::{Settle, all_of_check, settle};
use weir_store::Kind;

/// What `connect` runs once to prove the user may do what the limiter's
/// scripts will do, on keys of the limiter's own shapes (`KEYS`): every
/// command the scripts call, reading and writing each key. Each key is
/// written to expire a millisecond later, and named so that no limiter key is (it
/// ends in `:probe`). A user the ACL refuses anything fails this call
/// with the command or key it lacks, rather than every later decision.
pub(crate) const PROOF: &str = r#"
redis.call('TIME')
redis.call('MGET', unpack(KEYS))
for _, key in ipairs(KEYS) do
  redis.call('SET', key, 'probe', 'PX', 1)
  redis.call('SETRANGE', key, 0, 'probe')
end
return 1
"#;

/// The skeleton every script shares. An algorithm fills in four pieces of
/// Lua ([`Body`]), pasted in place rather than called, because a Lua
/// function call per key and step is a measurable share of a batched
/// script's time:
///
/// * `PARAMS` — reads the parameters once per call and defines `P`, their
///   number;
/// * `LOAD` — from `v`, the stored string or `false`, declares the key's
///   state as locals, and `stored_second`: the whole second (epoch µs)
///   that the key's expiry was set from, or `nil` (no state, or one whose
///   expiry is not worth knowing: a write then replaces it whole). It may
///   set `dirty` to have the key written even if no decision changes it
///   (a token bucket whose quota changed needs a later expiry);
/// * `DECIDE` — given `cost`, sets `allowed` (1 or 0), `remaining` (units)
///   and `reset` and `retry` (µs), all unrounded, and updates the state
///   locals;
/// * `STORE` — sets `value`, the state as stored, and `second`: the whole
///   second (epoch µs) in which the state becomes fresh again (equal to no
///   state at all); the key expires two seconds after it.
///
/// `DECIDE` and `STORE` run in their own `do … end` block, so their own
/// locals cannot shadow the loop's (`key`, `i`).
///
/// The reply is one string: the server's `now` (epoch µs, a little-endian
/// double: the instant every allowed decision's receipt names), then
/// 25-byte records, one per decision in `KEYS` order: `allowed` as a byte,
/// then `remaining`, `reset` and `retry` as little-endian doubles, rounded
/// by the client ([`decode`]). One string instead of four integers a
/// decision saves Redis a Lua table slot and a reply integer per number,
/// and the client a parsed value per number.
const SKELETON: &str = r#"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local EPS = 1e-9
local floor = math.floor
local pack, unpack_state = struct.pack, struct.unpack
--[[PARAMS]]
local n = #KEYS
if n == 0 then return '' end
-- one cost for every decision when the caller sent only one
local one_cost = #ARGV == P + 1 and tonumber(ARGV[P + 1])
local vals
if n <= 256 then
  vals = redis.call('MGET', unpack(KEYS))
else
  -- `unpack` of a very long list would overflow Lua's C stack
  vals = {}
  for from = 1, n, 256 do
    local to = math.min(n, from + 255)
    local got = redis.call('MGET', unpack(KEYS, from, to))
    for j = from, to do vals[j] = got[j - from + 1] end
  end
end
-- the plain path commits every allowed decision (see `all_of_check`)
local commit = true
local out, i = { pack('<d', now) }, 1
while i <= n do
  local key, v = KEYS[i], vals[i]
  local dirty = false
  --[[LOAD]]
  repeat
    local cost = one_cost or tonumber(ARGV[P + i])
    local allowed, remaining, reset, retry
    do
      --[[DECIDE]]
    end
    if allowed == 1 then dirty = true end
    out[i + 1] = pack('<Bddd', allowed, remaining, reset, retry)
    i = i + 1
  until KEYS[i] ~= key
  if dirty then
    local value, second
    do
      --[[STORE]]
    end
    -- States expire at whole-second deadlines: the second after the one
    -- in which the state becomes fresh again, so idle keys vanish at most
    -- two seconds late. While that second does not move, the key keeps its
    -- expiry and its value is overwritten in place (SETRANGE of the whole
    -- value: cheaper than SET ... KEEPTTL), which is only right over a
    -- value of the same length; anything else is replaced whole.
    if second == stored_second and #v == #value then
      redis.call('SETRANGE', key, '0', value)
    else
      redis.call('SET', key, value, 'PXAT', second / 1000 + 2000)
    end
  end
end
return table.concat(out)
"#;

/// One algorithm's pieces of the [`SKELETON`], and of the all-of and
/// settling scripts ([`all_of_check`], [`settle`]).
///
/// `DECIDE` changes the state only when `commit` is true (the all-of
/// script peeks every limit before it commits any). `CHARGE` and `REFUND`
/// are the forced charge and the refund by receipt of
/// [`Algorithm::charge`](weir_rate::Algorithm::charge) and
/// [`Algorithm::refund`](weir_rate::Algorithm::refund): given `cost` (and for a
/// refund `at`, the receipt's server time in µs), they update the state
/// locals and set `dirty` when they changed them.
struct Body {
    /// How many `ARGV` entries `params` reads (its `P`).
    params_len: usize,
    params: &'static str,
    load: &'static str,
    decide: &'static str,
    store: &'static str,
    charge: &'static str,
    refund: &'static str,
}

/// The full source of one algorithm's single-limit script.
fn source(body: &Body) -> String {
    SKELETON
        .replacen("--[[PARAMS]]", body.params, 1)
        .replacen("--[[LOAD]]", body.load, 1)
        .replacen("--[[DECIDE]]", body.decide, 1)
        .replacen("--[[STORE]]", body.store, 1)
}

/// One key's answer as the script returns it, before it becomes a
/// [`Decision`](weir_rate::Decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) retry_after_us: u64,
}

/// Bytes per decision in a script's reply.
pub(crate) const RECORD: usize = 25;

/// Bytes of a reply's header, the server's `now`.
pub(crate) const HEADER: usize = 8;

/// The server's time heading a reply (whole epoch µs) and the records
/// after it; `None` for a reply too short to hold it.
pub(crate) fn split_reply(reply: &[u8]) -> Option<(u64, &[u8])> {
    let (head, records) = reply.split_first_chunk::<HEADER>()?;
    // `as` saturates: a negative or NaN time becomes 0.
    Some((f64::from_le_bytes(*head) as u64, records))
}

/// One decision's record of a script's reply, rounded as the in-process
/// limiters round: `remaining` down, the durations up, to whole
/// microseconds, never below zero (`EPS` absorbs the doubles' error).
/// `record` must hold [`RECORD`] bytes.
pub(crate) fn decode(record: &[u8]) -> Raw {
    const EPS: f64 = 1e-9;
    let num = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&record[at..at + 8]);
        f64::from_le_bytes(b)
    };
    // `as` saturates: a negative or NaN value becomes 0.
    Raw {
        allowed: record[0] == 1,
        remaining: (num(1) + EPS).floor() as u64,
        reset_after_us: (num(9) - EPS).ceil() as u64,
        retry_after_us: (num(17) - EPS).ceil() as u64,
    }
}

fn body(algorithm: Kind) -> &'static Body {
    match algorithm {
        Kind::TokenBucket => &TOKEN_BUCKET,
        Kind::Gcra { .. } => &GCRA,
        Kind::FixedWindow => &FIXED_WINDOW,
        Kind::SlidingWindow { .. } => &SLIDING_WINDOW,
    }
}

/// The script deciding one limit per key (the plain and batched paths of
/// a single limit).
pub(crate) fn check(algorithm: Kind) -> String {
    source(body(algorithm))
}

#[cfg(test)]
mod tests;
