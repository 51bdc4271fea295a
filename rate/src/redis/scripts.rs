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

use super::Algorithm;

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
/// [`Limiter::charge`](crate::Limiter::charge) and
/// [`Limiter::refund`](crate::Limiter::refund): given `cost` (and for a
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

/// Token bucket. `ARGV[1]` = nanoseconds per token (`T`, may be
/// fractional), `ARGV[2]` = capacity (`burst`). State: one time `z`, when
/// the bucket was (or would have been) empty, so
/// `tokens = min(burst, (now - z) / T)` — the same bucket as a token count
/// and a timestamp, in a single time, stored as [`GCRA`] stores its own.
///
/// When the bucket would be full again only after the key's expiry, the
/// quota changed since it was written (a lower rate, a larger burst): the
/// key is then written again, with a later expiry, whatever the decision,
/// so it never vanishes and comes back full early.
const TOKEN_BUCKET: Body = Body {
    params_len: 2,
    params: r#"
local P = 2
local T = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local full = burst * T
local Tu = T / 1000
"#,
    load: r#"
-- z in ns from now; a full bucket's is -full
local z, stored_second = -full, nil
if v and #v == 16 then
  local base, off = unpack_state('<dd', v)
  stored_second = base
  base = (base - now) * 1000
  off = base + off
  if off > z then
    z = off
    -- not full again before it expires: the quota changed
    if off + full > base + 1000000000 then dirty = true end
  end
elseif v and #v == 8 then
  -- the former state, epoch µs (replaced whole when written)
  local off = (unpack_state('<d', v) - now) * 1000
  if off > z then z = off end
end
"#,
    decide: r#"
local tokens = -z / T
if tokens + EPS >= cost then
  tokens = tokens - cost
  if commit then z = z + cost * T end
  allowed, remaining, reset, retry = 1, tokens, (burst - tokens) * Tu, 0
else
  allowed, remaining, reset, retry = 0, tokens, (burst - tokens) * Tu, (cost - tokens) * Tu
end
"#,
    store: r#"
second = now + (z + full) / 1000
second = second - second % 1000000
value = pack('<dd', second, z - (second - now) * 1000)
"#,
    // The level may go past the burst: `z` (when the bucket was empty)
    // moves into the future, a debt refilled before any check passes.
    charge: r#"
z = z + cost * T
if z > DEBT then z = DEBT end
dirty = true
"#,
    // What of the spending the bucket cannot have refilled since it was
    // charged, never leaving more than a full bucket.
    refund: r#"
local elapsed = (now - at) * 1000
if elapsed < 0 then elapsed = 0 end
local back = cost * T - elapsed
if back > 0 then
  z = z - back
  if z < -full then z = -full end
  dirty = true
end
"#,
};

/// GCRA. `ARGV[1]` = nanoseconds per unit (`T`, whole, as `Gcra` rounds
/// it), `ARGV[2]` = `burst`. State: the theoretical arrival time `tat`.
///
/// A time is stored as two doubles: the whole second (epoch µs) after
/// which the key expires, and the time in ns from that second, both whole
/// numbers far below 2^53; the script works in ns from `now` (`tat - now`
/// is at most `τ`). So GCRA decides exactly as the in-process
/// [`Gcra`](crate::Gcra) does while `τ = burst × T` is under 2^53 ns (104
/// days). A single double of epoch µs, as before, is 0.25 µs coarse
/// today: a unit worth under half that never moved it (GCRA at 10 M/s
/// allowed everything) and others were rounded (3 M/s admitted 4 M/s).
/// The stored second is the key's expiry, not derived from the quota, so
/// an overwrite in place never keeps an expiry that a new quota outgrew.
const GCRA: Body = Body {
    params_len: 2,
    params: r#"
local P = 2
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2]) * T
"#,
    load: r#"
-- tat in ns from now, 0 once passed
local tat, stored_second = 0, nil
if v and #v == 16 then
  local base, off = unpack_state('<dd', v)
  stored_second = base
  tat = (base - now) * 1000 + off
  if tat < 0 then tat = 0 end
elseif v and #v == 8 then
  -- the former state, epoch µs (replaced whole when written)
  tat = (unpack_state('<d', v) - now) * 1000
  if tat < 0 then tat = 0 end
end
"#,
    decide: r#"
local new = tat + cost * T
if new > tau then
  allowed, remaining, reset, retry = 0, (tau - tat) / T, tat / 1000, (new - tau) / 1000
else
  if commit then tat = new end
  allowed, remaining, reset, retry = 1, (tau - new) / T, new / 1000, 0
end
"#,
    store: r#"
second = now + tat / 1000 -- fresh once tat has passed
second = second - second % 1000000
value = pack('<dd', second, tat - (second - now) * 1000)
"#,
    charge: r#"
tat = tat + cost * T
if tat > DEBT then tat = DEBT end
dirty = true
"#,
    // Back by the part of the spending's `cost·T` not yet elapsed.
    refund: r#"
local whole = cost * T
local back = (at - now) * 1000 + whole
if back > whole then back = whole end
if back > 0 then
  tat = tat - back
  if tat < 0 then tat = 0 end
  dirty = true
end
"#,
};

/// Fixed window aligned to the server clock. `ARGV[1]` = window in
/// microseconds, `ARGV[2]` = limit. State: two numbers, the window index
/// and the units counted in it.
const FIXED_WINDOW: Body = Body {
    params_len: 2,
    params: r#"
local P = 2
local W = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local idx = floor(now / W)
local window_reset = (idx + 1) * W - now
-- fresh again at the window's end
local window_second = (idx + 1) * W
window_second = window_second - window_second % 1000000
"#,
    load: r#"
local count, stored_second = 0, nil
if v and #v == 16 then
  local stored_idx, stored_count = unpack_state('<dd', v)
  if stored_idx == idx then count, stored_second = stored_count, window_second end
end
"#,
    decide: r#"
if count + cost <= limit then
  local after = count + cost
  if commit then count = after end
  allowed, remaining, reset, retry = 1, limit - after, window_reset, 0
else
  allowed, remaining, reset, retry = 0, limit - count, window_reset, window_reset
end
"#,
    store: r#"
value, second = pack('<dd', idx, count), window_second
"#,
    charge: r#"
count = count + cost
dirty = true
"#,
    // Only to the window it was charged to, while that is the current one.
    refund: r#"
if floor(at / W) == idx and count > 0 then
  count = count - cost
  if count < 0 then count = 0 end
  dirty = true
end
"#,
};

/// Sliding-window counter over `c` counters of `S = W / (c - 1)` each.
/// `ARGV[1]` = sub-window `S` in microseconds, `ARGV[2]` = limit,
/// `ARGV[3]` = `c`. The window `[now - W, now]` is the current sub-window,
/// the `c - 2` before it, and the part of the oldest one still inside,
/// weighted by the fraction still inside (`c = 2` is Cloudflare's
/// two-window estimate). State: a ring of `c` pairs (sub-window index,
/// count) as `2c` numbers; ring slot `j` holds sub-window `i ≡ j (mod c)`,
/// so no window key is ever computed inside the script. Its loops over the
/// ring stay functions, defined once per call.
const SLIDING_WINDOW: Body = Body {
    params_len: 3,
    params: r#"
local P = 3
local S = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local c = tonumber(ARGV[3])
local W = S * (c - 1)
local idx = floor(now / S)
local e = now - idx * S
local FORMAT = '<' .. string.rep('d', 2 * c)
-- the current sub-window's place in the ring, and the second in which a
-- state written now becomes fresh again (the sub-window slid out)
local slot = 2 * (idx % c) + 1
local ring_second = (idx + c) * S
ring_second = ring_second - ring_second % 1000000
-- the ring, the counts by age (counts[k] = sub-window idx - k) and, if
-- the current sub-window is stored, the second its expiry was set from
local function load_ring(v)
  local ring
  if v and #v == 16 * c then
    ring = { unpack_state(FORMAT, v) }
  else
    ring = {}
    for j = 1, 2 * c do ring[j] = -1 end
  end
  local counts = {}
  for k = 0, c - 1 do
    local want = idx - k
    local j = want % c
    local count = 0
    if ring[2 * j + 1] == want then count = ring[2 * j + 2] end
    counts[k] = count
  end
  if ring[slot] == idx then return ring, counts, ring_second end
  return ring, counts, nil
end
-- the sub-window counts as seen `s` sub-window boundaries from now
-- (nothing more being spent): the full ones' sum, the oldest (partly
-- inside) one, and the time already elapsed in the current sub-window
local function segment(counts, s)
  local full = 0
  for k = 0, c - 2 do
    local m = k - s
    if m >= 0 then full = full + counts[m] end
  end
  local old = 0
  if c - 1 - s >= 0 then old = counts[c - 1 - s] end
  if s == 0 then return full, old, e end
  return full, old, 0
end
local function reset_after(counts)
  for k = 0, c - 1 do
    if counts[k] > 0 then return (idx - k + c) * S - now end
  end
  return 0
end
-- the first moment `cost` more would fit, nothing more being spent
local function retry_after(counts, cost)
  for s = 0, c do
    local x0 = 0
    if s > 0 then x0 = (idx + s) * S - now end
    local f, o, ex = segment(counts, s)
    if f + cost <= limit + EPS then
      local at_start = f + o * (S - ex) / S
      if at_start + cost <= limit + EPS or o <= 0 then return x0 end
      return x0 + (S - ex) - (limit - cost - f) * S / o
    end
  end
  return W
end
"#,
    load: r#"
local ring, counts, stored_second = load_ring(v)
"#,
    decide: r#"
local full, old = segment(counts, 0)
local est = full + old * (S - e) / S
if est + cost <= limit + EPS then
  if commit then counts[0] = counts[0] + cost end
  allowed, remaining, reset, retry = 1, limit - est - cost, reset_after(counts), 0
else
  allowed, remaining, reset, retry = 0, limit - est, reset_after(counts), retry_after(counts, cost)
end
"#,
    store: r#"
ring[slot] = idx
ring[slot + 1] = counts[0]
value, second = pack(FORMAT, unpack(ring, 1, 2 * c)), ring_second
"#,
    charge: r#"
counts[0] = counts[0] + cost
dirty = true
"#,
    // Out of the sub-window it was charged to, while that one still
    // counts (one of the `c` newest); an older sub-window's count is
    // written back to its own ring slot here, the current one's by STORE.
    refund: r#"
local k = idx - floor(at / S)
if k >= 0 and k < c and counts[k] > 0 then
  local left = counts[k] - cost
  if left < 0 then left = 0 end
  counts[k] = left
  if k > 0 then
    local j = 2 * ((idx - k) % c) + 1
    ring[j], ring[j + 1] = idx - k, left
  end
  dirty = true
end
"#,
};

/// The full source of one algorithm's single-limit script.
fn source(body: &Body) -> String {
    SKELETON
        .replacen("--[[PARAMS]]", body.params, 1)
        .replacen("--[[LOAD]]", body.load, 1)
        .replacen("--[[DECIDE]]", body.decide, 1)
        .replacen("--[[STORE]]", body.store, 1)
}

/// One key's answer as the script returns it, before it becomes a
/// [`Decision`](crate::Decision).
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

fn body(algorithm: Algorithm) -> &'static Body {
    match algorithm {
        Algorithm::TokenBucket => &TOKEN_BUCKET,
        Algorithm::Gcra { .. } => &GCRA,
        Algorithm::FixedWindow => &FIXED_WINDOW,
        Algorithm::SlidingWindow { .. } => &SLIDING_WINDOW,
    }
}

/// The script deciding one limit per key (the plain and batched paths of
/// a single limit).
pub(crate) fn check(algorithm: Algorithm) -> String {
    source(body(algorithm))
}

/// What the generated scripts ([`all_of_check`], [`settle`]) start with:
/// the clock and helpers of [`SKELETON`], `ALL` (the whole `ARGV`, which
/// each limit's block shadows with its own parameters), the most a debt
/// may run ahead, and the key reads and writes.
const GENERATED_HEADER: &str = r#"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local EPS = 1e-9
local floor = math.floor
local pack, unpack_state = struct.pack, struct.unpack
local ALL = ARGV
-- A forced charge keeps a debt up to 2^61 ns (73 years) ahead of now:
-- further, the key's expiry would no longer be a plain integer to Redis.
local DEBT = 2305843009213693952
local function read(keys)
  local n = #keys
  if n <= 256 then return redis.call('MGET', unpack(keys)) end
  -- `unpack` of a very long list would overflow Lua's C stack
  local vals = {}
  for from = 1, n, 256 do
    local to = math.min(n, from + 255)
    local got = redis.call('MGET', unpack(keys, from, to))
    for j = from, to do vals[j] = got[j - from + 1] end
  end
  return vals
end
-- As SKELETON writes: in place while the expiry second stays put.
local function write(key, v, value, second, stored_second)
  if second == stored_second and #v == #value then
    redis.call('SETRANGE', key, '0', value)
  else
    redis.call('SET', key, value, 'PXAT', second / 1000 + 2000)
  end
end
"#;

/// Each limit's parameters, in a block of its own: `ARGV` shadowed by the
/// limit's slice of the call's arguments, so its `PARAMS` read them as in
/// [`SKELETON`], and `make` (Lua source defining `<name>_<k>` from the
/// block's locals) pasted after them. Returns the source and the number
/// of parameters in all.
fn limit_blocks(
    algorithms: &[Algorithm],
    name: &str,
    make: &dyn Fn(&Body) -> String,
) -> (String, usize) {
    let mut out = String::new();
    let mut from = 1;
    for (k, &algorithm) in algorithms.iter().enumerate() {
        let body = body(algorithm);
        let to = from + body.params_len - 1;
        out.push_str(&format!(
            "local {name}_{k}\ndo\nlocal ARGV = {{ unpack(ALL, {from}, {to}) }}\n{}\n{name}_{k} = {}\nend\n",
            body.params,
            make(body)
        ));
        from = to + 1;
    }
    (out, from - 1)
}

/// The script deciding a set of limits of each key all-or-nothing, one
/// Redis key per limit.
///
/// `KEYS` holds `L` keys per decision (`L = algorithms.len()`, in the
/// order of `algorithms`), decisions of one key adjacent; `ARGV` holds
/// every limit's parameters in that order, then the costs as in
/// [`SKELETON`]. Each limit's `LOAD`, `DECIDE` and `STORE` run as in
/// [`SKELETON`], but inside closures over the limit's own locals (a Lua
/// function call per limit and step, which the single-limit script
/// avoids): every limit is peeked (`commit` false) and, only if all
/// allow, decided again committing — which cannot then deny, as
/// in-process [`AllOf`](crate::AllOf) does. The reply is the server's
/// `now` then `L` records per decision, each limit's own answer (the
/// client combines them as [`Decision::combine`](crate::Decision::combine)
/// does in process).
pub(crate) fn all_of_check(algorithms: &[Algorithm]) -> String {
    let (blocks, params) = limit_blocks(algorithms, "open", &|body| {
        format!(
            r#"function(v)
  local dirty = false
  {load}
  local function decide(cost, commit)
    local allowed, remaining, reset, retry
    do
      {decide}
    end
    if commit and allowed == 1 then dirty = true end
    return allowed, remaining, reset, retry
  end
  local function store(key)
    if not dirty then return end
    local value, second
    do
      {store}
    end
    write(key, v, value, second, stored_second)
  end
  return decide, store
end"#,
            load = body.load,
            decide = body.decide,
            store = body.store,
        )
    });
    let l = algorithms.len();
    let each = |f: &dyn Fn(usize) -> String, sep: &str| (0..l).map(f).collect::<Vec<_>>().join(sep);
    let answers = |k: usize| format!("a{k}, r{k}, t{k}, y{k}");
    format!(
        r#"{GENERATED_HEADER}
{blocks}
local P, L = {params}, {l}
local m = #KEYS / L
if m == 0 then return pack('<d', now) end
local one_cost = #ALL == P + 1 and tonumber(ALL[P + 1])
local vals = read(KEYS)
local out, i = {{ pack('<d', now) }}, 1
while i <= m do
  local base = (i - 1) * L
  local key = KEYS[base + 1]
  {open}
  repeat
    local cost = one_cost or tonumber(ALL[P + i])
    {peek}
    if {all} then
      {commit}
    end
    out[i + 1] = pack('<{format}', {records})
    i = i + 1
  until KEYS[(i - 1) * L + 1] ~= key
  {store}
end
return table.concat(out)
"#,
        open = each(
            &|k| format!(
                "local decide_{k}, store_{k} = open_{k}(vals[base + {}])",
                k + 1
            ),
            "\n  "
        ),
        peek = each(
            &|k| format!("local {} = decide_{k}(cost, false)", answers(k)),
            "\n    "
        ),
        all = each(&|k| format!("a{k} == 1"), " and "),
        commit = each(
            &|k| format!("{} = decide_{k}(cost, true)", answers(k)),
            "\n      "
        ),
        format = "Bddd".repeat(l),
        records = each(&answers, ", "),
        store = each(&|k| format!("store_{k}(KEYS[base + {}])", k + 1), "\n  "),
    )
}

/// What a [`settle`] call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// A forced charge of `cost` units.
    Charge,
    /// A refund of the receipt of `cost` units at `at` (server µs).
    Refund,
}

impl Settle {
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Charge => 1,
            Self::Refund => 2,
        }
    }
}

/// The script of forced charges and refunds for a set of limits of one
/// key (one limit for a single limiter): `KEYS` holds the key's `L` Redis
/// keys, `ARGV` every limit's parameters, then the operation
/// ([`Settle::code`]), the cost and the receipt's time (µs). Every limit
/// is charged, or refunded by the receipt, by its `CHARGE` or `REFUND`
/// and written back if that changed it. The reply is the server's `now`
/// (a charge's receipt instant).
pub(crate) fn settle(algorithms: &[Algorithm]) -> String {
    let (blocks, params) = limit_blocks(algorithms, "settle", &|body| {
        format!(
            r#"function(key, v, op, cost, at)
  local dirty = false
  {load}
  if op == 1 then
    {charge}
  else
    {refund}
  end
  if dirty then
    local value, second
    do
      {store}
    end
    write(key, v, value, second, stored_second)
  end
end"#,
            load = body.load,
            charge = body.charge,
            refund = body.refund,
            store = body.store,
        )
    });
    let calls: Vec<String> = (0..algorithms.len())
        .map(|k| format!("settle_{k}(KEYS[{0}], vals[{0}], op, cost, at)", k + 1))
        .collect();
    format!(
        r#"{GENERATED_HEADER}
{blocks}
local P = {params}
local op, cost, at = tonumber(ALL[P + 1]), tonumber(ALL[P + 2]), tonumber(ALL[P + 3])
local vals = read(KEYS)
{calls}
return pack('<d', now)
"#,
        calls = calls.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::Algorithm;

    fn record(allowed: u8, remaining: f64, reset: f64, retry: f64) -> Vec<u8> {
        let mut r = vec![allowed];
        for x in [remaining, reset, retry] {
            r.extend_from_slice(&x.to_le_bytes());
        }
        r
    }

    #[test]
    fn decode_rounds_as_the_in_process_limiters() {
        // remaining down, durations up, with the doubles' error absorbed
        let raw = decode(&record(1, 4.999_999_999_9, 1_000.000_000_000_1, 0.0));
        assert_eq!(
            raw,
            Raw {
                allowed: true,
                remaining: 5,
                reset_after_us: 1000,
                retry_after_us: 0
            }
        );
        let raw = decode(&record(0, 4.5, 1000.5, 2.25));
        assert_eq!(
            raw,
            Raw {
                allowed: false,
                remaining: 4,
                reset_after_us: 1001,
                retry_after_us: 3
            }
        );
    }

    #[test]
    fn decode_never_yields_a_negative_or_garbage_value() {
        let raw = decode(&record(1, -3.0, -0.5, f64::NAN));
        assert_eq!(
            (raw.remaining, raw.reset_after_us, raw.retry_after_us),
            (0, 0, 0)
        );
        let raw = decode(&record(0, 1e30, f64::INFINITY, 1e300));
        assert_eq!(
            (raw.remaining, raw.reset_after_us, raw.retry_after_us),
            (u64::MAX, u64::MAX, u64::MAX)
        );
        // only 1 means allowed
        assert!(!decode(&record(2, 0.0, 0.0, 0.0)).allowed);
    }

    const ALL_KINDS: [Algorithm; 4] = [
        Algorithm::TokenBucket,
        Algorithm::Gcra { interval_nanos: 1 },
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow {
            counters: 2,
            sub_window_nanos: 1,
        },
    ];

    /// Each limit's block reads its own slice of the arguments, in order.
    #[test]
    fn generated_scripts_give_each_limit_its_own_arguments() {
        let set = [ALL_KINDS[3], ALL_KINDS[1], ALL_KINDS[2]];
        let script = all_of_check(&set);
        assert!(script.contains("local ARGV = { unpack(ALL, 1, 3) }"));
        assert!(script.contains("local ARGV = { unpack(ALL, 4, 5) }"));
        assert!(script.contains("local ARGV = { unpack(ALL, 6, 7) }"));
        assert!(script.contains("local P, L = 7, 3"));
        assert!(
            script
                .contains("pack('<BdddBdddBddd', a0, r0, t0, y0, a1, r1, t1, y1, a2, r2, t2, y2)")
        );
        let settle = settle(&set);
        assert!(settle.contains("local P = 7"));
        assert!(settle.contains("settle_2(KEYS[3], vals[3], op, cost, at)"));
        assert!(!script.contains("--[[") && !settle.contains("--[["));
    }

    #[test]
    fn every_script_has_its_pieces_pasted_in() {
        for algorithm in ALL_KINDS {
            let script = check(algorithm);
            assert!(!script.contains("--[["), "a placeholder was left in");
            let body = body(algorithm);
            assert!(
                body.params
                    .contains(&format!("local P = {}", body.params_len)),
                "{algorithm}: params_len is not its P"
            );
        }
    }
}
