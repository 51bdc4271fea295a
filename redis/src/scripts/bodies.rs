//! Each algorithm's pieces of Lua ([`Body`](super::Body)): the token
//! bucket, GCRA, the fixed window and the sliding-window counter.

use super::Body;

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
pub(super) const TOKEN_BUCKET: Body = Body {
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
/// [`Gcra`](weir_rate::Gcra) does while `τ = burst × T` is under 2^53 ns (104
/// days). A single double of epoch µs, as before, is 0.25 µs coarse
/// today: a unit worth under half that never moved it (GCRA at 10 M/s
/// allowed everything) and others were rounded (3 M/s admitted 4 M/s).
/// The stored second is the key's expiry, not derived from the quota, so
/// an overwrite in place never keeps an expiry that a new quota outgrew.
pub(super) const GCRA: Body = Body {
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
pub(super) const FIXED_WINDOW: Body = Body {
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
local idx, window_reset, window_second = idx, window_reset, window_second
if v and #v == 16 then
  local stored_idx, stored_count = unpack_state('<dd', v)
  if stored_idx > idx then
    -- A later window than this server's clock says (a clock that stepped
    -- back): the key stays in it, never in an earlier one.
    idx = stored_idx
    window_reset = (idx + 1) * W - now
    window_second = (idx + 1) * W
    window_second = window_second - window_second % 1000000
  end
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
pub(super) const SLIDING_WINDOW: Body = Body {
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
