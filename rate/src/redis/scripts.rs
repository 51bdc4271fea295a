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
/// The reply is one string of 25-byte records, one per decision in `KEYS`
/// order: `allowed` as a byte, then `remaining`, `reset` and `retry` as
/// little-endian doubles, rounded by the client ([`decode`]). One string
/// instead of four integers a decision saves Redis a Lua table slot and a
/// reply integer per number, and the client a parsed value per number.
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
local out, i = {}, 1
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
    out[i] = pack('<Bddd', allowed, remaining, reset, retry)
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

/// One algorithm's pieces of the [`SKELETON`].
struct Body {
    params: &'static str,
    load: &'static str,
    decide: &'static str,
    store: &'static str,
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
  z = z + cost * T
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
  tat = new
  allowed, remaining, reset, retry = 1, (tau - new) / T, new / 1000, 0
end
"#,
    store: r#"
second = now + tat / 1000 -- fresh once tat has passed
second = second - second % 1000000
value = pack('<dd', second, tat - (second - now) * 1000)
"#,
};

/// Fixed window aligned to the server clock. `ARGV[1]` = window in
/// microseconds, `ARGV[2]` = limit. State: two numbers, the window index
/// and the units counted in it.
const FIXED_WINDOW: Body = Body {
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
  count = count + cost
  allowed, remaining, reset, retry = 1, limit - count, window_reset, 0
else
  allowed, remaining, reset, retry = 0, limit - count, window_reset, window_reset
end
"#,
    store: r#"
value, second = pack('<dd', idx, count), window_second
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
  counts[0] = counts[0] + cost
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
};

/// The full source of one algorithm's script.
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

pub(crate) fn token_bucket() -> String {
    source(&TOKEN_BUCKET)
}
pub(crate) fn gcra() -> String {
    source(&GCRA)
}
pub(crate) fn fixed_window() -> String {
    source(&FIXED_WINDOW)
}
pub(crate) fn sliding_window() -> String {
    source(&SLIDING_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_script_has_its_pieces_pasted_in() {
        for script in [token_bucket(), gcra(), fixed_window(), sliding_window()] {
            assert!(!script.contains("--[["), "a placeholder was left in");
            assert!(script.contains("local P = "));
        }
    }
}
