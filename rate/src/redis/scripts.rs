//! The Lua scripts, one per algorithm.
//!
//! Every script has the same shape, so that one script decides one key
//! (the plain path) or many keys (the batched path):
//!
//! * `KEYS[i]` — the Redis key of the i-th decision (one Redis key per
//!   limiter key, so a decision never touches a key that is not in `KEYS`);
//!   decisions on the same key must be adjacent (the batcher sorts them,
//!   stably, so they are still decided in arrival order);
//! * `ARGV[1..P]` — the algorithm's parameters, shared by the whole call;
//! * `ARGV[P + i]` — the cost of the i-th decision.
//!
//! The reply is a flat array of four integers per key: `allowed` (1 or 0),
//! `remaining`, `reset_after` and `retry_after` in whole microseconds
//! (rounded up). Time is the server's `TIME`, read once per call; since
//! Redis 5 scripts replicate their effects, so reading the clock inside a
//! script is allowed and replicas see the resulting writes, not a second
//! clock reading.
//!
//! # Cost per decision
//!
//! Redis runs scripts on its one thread, shared by every instance of the
//! service, so the scripts are written for the server's time per key. The
//! report measures what each step costs inside a script (`cargo xtask
//! bench --only redis`, table "one step inside a script"); in a quick run
//! on the 2-core development VM with Redis 7.0: `MGET` about 0.5 µs a key
//! (with the Lua table it reads from), `SET … KEEPTTL` about 1 µs, `SET …
//! PXAT` about 0.7 µs more, a Lua number as a `SET` argument (formatted by
//! Redis) or a packed double about 0.15 µs more. Reading several numbers
//! back out of text (`string.match`, `gmatch`, `tonumber`) and writing them
//! with `string.format` cost the old text-format scripts most: replacing
//! them made the sliding-window counter's script about twice as cheap per
//! key. Hence:
//!
//! * one `MGET` (in chunks) reads every key of a call;
//! * state is stored as packed doubles (`struct.pack`, 8 bytes a number)
//!   rather than formatted text;
//! * a key's state lives in Lua locals between `load`, its adjacent
//!   decisions and `store` — no table per key — and is written once, only
//!   if a decision changed it;
//! * the expiry is a whole-second deadline derived from the state, so
//!   while the deadline stays put the write is `SET … KEEPTTL`.

/// The skeleton every script shares. `BODY` defines `P` (the number of
/// parameters) and three functions over a state held in two values
/// `(s, t)`: `load(v)` turns the stored string (or `false`) into a state
/// and the deadline it was stored with; `decide(s, t, cost)` returns
/// `allowed, remaining, reset_after, retry_after, s, t`; `store(key, s, t,
/// old_deadline)` writes a changed state back.
const SKELETON: &str = r#"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local EPS = 1e-9
local floor, ceil = math.floor, math.ceil
local pack, unpack_state = struct.pack, struct.unpack
-- States expire at whole-second deadlines: the second after the one in
-- which the state becomes fresh again (equal to no state at all). While
-- the deadline does not move, the key keeps its expiry (KEEPTTL, cheaper
-- than a new one); idle keys still vanish at most two seconds late.
local function deadline(fresh_at) return (floor(fresh_at / 1000000) + 2) * 1000 end
local function put(key, value, fresh_at, old_deadline)
  local d = deadline(fresh_at)
  if d == old_deadline then
    redis.call('SET', key, value, 'KEEPTTL')
  else
    redis.call('SET', key, value, 'PXAT', d)
  end
end
BODY
local n = #KEYS
local vals = {}
for from = 1, n, 256 do
  local to = math.min(n, from + 255)
  local got = redis.call('MGET', unpack(KEYS, from, to))
  for j = from, to do vals[j] = got[j - from + 1] end
end
local out, o, i = {}, 0, 1
while i <= n do
  local key = KEYS[i]
  local s, t, old_deadline = load(vals[i])
  local dirty = false
  repeat
    local a, rem, reset, retry
    a, rem, reset, retry, s, t = decide(s, t, tonumber(ARGV[P + i]))
    if a == 1 then dirty = true end
    rem, reset, retry = floor(rem + EPS), ceil(reset - EPS), ceil(retry - EPS)
    if rem < 0 then rem = 0 end
    if reset < 0 then reset = 0 end
    if retry < 0 then retry = 0 end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = a, rem, reset, retry
    o = o + 4
    i = i + 1
  until KEYS[i] ~= key
  if dirty then store(key, s, t, old_deadline) end
end
return out
"#;

/// Token bucket. `ARGV[1]` = microseconds per token (`T`, may be
/// fractional), `ARGV[2]` = capacity (`burst`). State: one number, the
/// server time `z` at which the bucket was (or would have been) empty, so
/// `tokens = min(burst, (now - z) / T)` — the same bucket as a token count
/// and a timestamp, in a single number.
const TOKEN_BUCKET: &str = r#"
local P = 2
local T = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local full_at = now - burst * T
local function load(v)
  local z, old_deadline = full_at, nil
  if v and #v == 8 then
    local stored = unpack_state('<d', v)
    -- fresh again (full) at z + burst * T
    old_deadline = deadline(stored + burst * T)
    if stored > z then z = stored end
  end
  return z, nil, old_deadline
end
local function decide(z, _, cost)
  local tokens = (now - z) / T
  if tokens + EPS >= cost then
    tokens = tokens - cost
    return 1, tokens, (burst - tokens) * T, 0, z + cost * T
  end
  return 0, tokens, (burst - tokens) * T, (cost - tokens) * T, z
end
local function store(key, z, _, old_deadline)
  put(key, pack('<d', z), z + burst * T, old_deadline)
end
"#;

/// GCRA. `ARGV[1]` = microseconds per unit (`T`), `ARGV[2]` = `burst`.
/// State: the theoretical arrival time `tat` (one number).
const GCRA: &str = r#"
local P = 2
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2]) * T
local function load(v)
  local tat, old_deadline = now, nil
  if v and #v == 8 then
    local stored = unpack_state('<d', v)
    -- fresh again once tat has passed
    old_deadline = deadline(stored)
    if stored > tat then tat = stored end
  end
  return tat, nil, old_deadline
end
local function decide(tat, _, cost)
  local new = tat + cost * T
  local allow_at = new - tau
  if allow_at > now + EPS then
    return 0, (now + tau - tat) / T, tat - now, allow_at - now, tat
  end
  return 1, (now + tau - new) / T, new - now, 0, new
end
local function store(key, tat, _, old_deadline)
  put(key, pack('<d', tat), tat, old_deadline)
end
"#;

/// Fixed window aligned to the server clock. `ARGV[1]` = window in
/// microseconds, `ARGV[2]` = limit. State: two numbers, the window index
/// and the units counted in it.
const FIXED_WINDOW: &str = r#"
local P = 2
local W = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local idx = floor(now / W)
local reset = (idx + 1) * W - now
local function load(v)
  local count, old_deadline = 0, nil
  if v and #v == 16 then
    local stored_idx, stored_count = unpack_state('<dd', v)
    -- fresh again when its window ends
    old_deadline = deadline((stored_idx + 1) * W)
    if stored_idx == idx then count = stored_count end
  end
  return count, nil, old_deadline
end
local function decide(count, _, cost)
  if count + cost <= limit then
    count = count + cost
    return 1, limit - count, reset, 0, count
  end
  return 0, limit - count, reset, reset, count
end
local function store(key, count, _, old_deadline)
  put(key, pack('<dd', idx, count), (idx + 1) * W, old_deadline)
end
"#;

/// Sliding-window counter over `c` counters of `S = W / (c - 1)` each.
/// `ARGV[1]` = sub-window `S` in microseconds, `ARGV[2]` = limit,
/// `ARGV[3]` = `c`. The window `[now - W, now]` is the current sub-window, the `c - 2`
/// before it, and the part of the oldest one still inside, weighted by the
/// fraction still inside (`c = 2` is Cloudflare's two-window estimate).
/// State: a ring of `c` pairs (sub-window index, count) as `2c` numbers;
/// ring slot `j` holds sub-window `i ≡ j (mod c)`, so no window key is
/// ever computed inside the script.
const SLIDING_WINDOW: &str = r#"
local P = 3
local S = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local c = tonumber(ARGV[3])
local W = S * (c - 1)
local idx = math.floor(now / S)
local e = now - idx * S
local FORMAT = '<' .. string.rep('d', 2 * c)
local function load(v)
  local ring, old_deadline
  if v and #v == 16 * c then
    ring = { unpack_state(FORMAT, v) }
    local newest = -1
    for j = 0, c - 1 do
      if ring[2 * j + 1] > newest then newest = ring[2 * j + 1] end
    end
    -- fresh again when the newest sub-window has slid out
    if newest >= 0 then old_deadline = deadline((newest + c) * S) end
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
  return counts, ring, old_deadline
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
local function decide(counts, ring, cost)
  local full, old, _ = segment(counts, 0)
  local est = full + old * (S - e) / S
  if est + cost <= limit + EPS then
    counts[0] = counts[0] + cost
    return 1, limit - est - cost, reset_after(counts), 0, counts, ring
  end
  local retry = nil
  for s = 0, c do
    local x0 = 0
    if s > 0 then x0 = (idx + s) * S - now end
    local f, o, ex = segment(counts, s)
    if f + cost <= limit + EPS then
      local at_start = f + o * (S - ex) / S
      if at_start + cost <= limit + EPS or o <= 0 then
        retry = x0
      else
        retry = x0 + (S - ex) - (limit - cost - f) * S / o
      end
      break
    end
  end
  if retry == nil then retry = W end
  return 0, limit - est, reset_after(counts), retry, counts, ring
end
local function store(key, counts, ring, old_deadline)
  local j = idx % c
  ring[2 * j + 1] = idx
  ring[2 * j + 2] = counts[0]
  -- fresh again when the current sub-window has slid out
  put(key, pack(FORMAT, unpack(ring, 1, 2 * c)), (idx + c) * S, old_deadline)
end
"#;

/// The full source of one algorithm's script.
fn source(body: &str) -> String {
    SKELETON.replacen("BODY", body, 1)
}

pub(crate) fn token_bucket() -> String {
    source(TOKEN_BUCKET)
}
pub(crate) fn gcra() -> String {
    source(GCRA)
}
pub(crate) fn fixed_window() -> String {
    source(FIXED_WINDOW)
}
pub(crate) fn sliding_window() -> String {
    source(SLIDING_WINDOW)
}
