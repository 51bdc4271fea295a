//! The Lua scripts, one per algorithm.
//!
//! Every script has the same shape, so that one script decides one key
//! (the plain path) or many keys (the batched path):
//!
//! * `KEYS[i]` — the Redis key of the i-th decision (one Redis key per
//!   limiter key, so a decision never touches a key that is not in `KEYS`);
//! * `ARGV[1..P]` — the algorithm's parameters, shared by the whole call;
//! * `ARGV[P + i]` — the cost of the i-th decision.
//!
//! State is one string per Redis key, read with one `MGET` for all the
//! keys of a call and written with one `SET` (keeping or setting an expiry) per changed key: one
//! command per decided key plus one per call.
//!
//! The reply is a flat array of four integers per key: `allowed` (1 or 0),
//! `remaining`, `reset_after` and `retry_after` in whole microseconds
//! (rounded up). Time is the server's `TIME`, read once per call; since
//! Redis 5 scripts replicate their effects, so reading the clock inside a
//! script is allowed and replicas see the resulting writes, not a second
//! clock reading. A key that repeats inside one call is loaded once, decided
//! in order, and written back once.

/// Shared prologue: the server clock and the per-call state cache.
const PROLOGUE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local EPS = 1e-9
local function fmt(x) return string.format('%.17g', x) end
-- States expire at whole-second deadlines: the second after the one in
-- which the state becomes fresh again. The deadline is a function of the
-- stored state, so while it does not change the key keeps its expiry
-- (SET … KEEPTTL, cheaper than a new expiry) and idle keys still vanish
-- at most two seconds late.
local function deadline(fresh_at) return (math.floor(fresh_at / 1000000) + 2) * 1000000 end
local function put(key, value, fresh_at, old_fresh_at)
  local d = deadline(fresh_at)
  if old_fresh_at ~= nil and deadline(old_fresh_at) == d then
    redis.call('SET', key, value, 'KEEPTTL')
  else
    redis.call('SET', key, value, 'PXAT', d / 1000)
  end
end
"#;

/// Shared epilogue: read every distinct key with `MGET` (in chunks), run
/// `decide` over the keys in order, then store the dirty states, so a
/// batch of `n` distinct keys costs about `n / 256 + n` commands rather
/// than `2n`.
const EPILOGUE: &str = r#"
local cache, order, out = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if cache[key] == nil then
    cache[key] = false
    order[#order + 1] = key
  end
end
for from = 1, #order, 256 do
  local to = math.min(#order, from + 255)
  local vals = redis.call('MGET', unpack(order, from, to))
  for j = from, to do cache[order[j]] = load(order[j], vals[j - from + 1]) end
end
for i = 1, #KEYS do
  local a, rem, reset, retry = decide(cache[KEYS[i]], tonumber(ARGV[P + i]))
  out[#out + 1] = a
  out[#out + 1] = math.max(0, math.floor(rem + EPS))
  out[#out + 1] = math.max(0, math.ceil(reset - EPS))
  out[#out + 1] = math.max(0, math.ceil(retry - EPS))
end
for _, key in ipairs(order) do
  local st = cache[key]
  if st.dirty then store(key, st) end
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
local function load(key, v)
  local old = tonumber(v)
  local z = old
  local full_at = now - burst * T
  if z == nil or z < full_at then z = full_at end
  return { z = z, old = old, dirty = false }
end
local function decide(st, cost)
  local tokens = (now - st.z) / T
  if tokens + EPS >= cost then
    st.z = st.z + cost * T
    st.dirty = true
    tokens = tokens - cost
    return 1, tokens, (burst - tokens) * T, 0
  end
  return 0, tokens, (burst - tokens) * T, (cost - tokens) * T
end
local function store(key, st)
  -- fresh again (full) at z + burst * T
  local old = nil
  if st.old ~= nil then old = st.old + burst * T end
  put(key, st.z, st.z + burst * T, old)
end
"#;

/// GCRA. `ARGV[1]` = microseconds per unit (`T`), `ARGV[2]` = `burst`.
/// State: the theoretical arrival time `tat` (one number).
const GCRA: &str = r#"
local P = 2
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2]) * T
local function load(key, v)
  local old = tonumber(v)
  local tat = old
  if tat == nil or tat < now then tat = now end
  return { tat = tat, old = old, dirty = false }
end
local function decide(st, cost)
  local new = st.tat + cost * T
  local allow_at = new - tau
  if allow_at > now + EPS then
    return 0, (now + tau - st.tat) / T, st.tat - now, allow_at - now
  end
  st.tat = new
  st.dirty = true
  return 1, (now + tau - new) / T, new - now, 0
end
local function store(key, st)
  -- fresh again once tat has passed
  put(key, st.tat, st.tat, st.old)
end
"#;

/// Fixed window aligned to the server clock. `ARGV[1]` = window in
/// microseconds, `ARGV[2]` = limit. State: one string `"<window index>
/// <units counted>"`.
const FIXED_WINDOW: &str = r#"
local P = 2
local W = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local idx = math.floor(now / W)
local reset = (idx + 1) * W - now
local function load(key, v)
  local n, old = 0, nil
  if v then
    local a, b = string.match(v, '^(%S+) (%S+)$')
    a = tonumber(a)
    if a ~= nil then old = (a + 1) * W end
    if a == idx then n = tonumber(b) or 0 end
  end
  return { n = n, old = old, dirty = false }
end
local function decide(st, cost)
  if st.n + cost <= limit then
    st.n = st.n + cost
    st.dirty = true
    return 1, limit - st.n, reset, 0
  end
  return 0, limit - st.n, reset, reset
end
local function store(key, st)
  -- fresh again when the window ends
  put(key, fmt(idx) .. ' ' .. fmt(st.n), (idx + 1) * W, st.old)
end
"#;

/// Sliding-window counter over `c` counters of `S = W / (c - 1)` each.
/// `ARGV[1]` = sub-window `S` in microseconds, `ARGV[2]` = limit,
/// `ARGV[3]` = `c`. The window `[now - W, now]` is the current sub-window, the `c - 2`
/// before it, and the part of the oldest one still inside, weighted by the
/// fraction still inside (`c = 2` is Cloudflare's two-window estimate).
/// State: one string per limiter key holding a ring of `c` pairs
/// `"<sub-window index> <count>"`; ring slot `j` holds sub-window
/// `i ≡ j (mod c)`, so no window key is ever computed inside the script.
const SLIDING_WINDOW: &str = r#"
local P = 3
local S = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local c = tonumber(ARGV[3])
local W = S * (c - 1)
local idx = math.floor(now / S)
local e = now - idx * S
local function load(key, v)
  local ring = {}
  if v then
    for x in string.gmatch(v, '%S+') do ring[#ring + 1] = tonumber(x) end
  end
  local old = nil
  if #ring ~= 2 * c then
    ring = {}
    for j = 1, 2 * c do ring[j] = -1 end
  else
    local newest = -1
    for j = 0, c - 1 do newest = math.max(newest, ring[2 * j + 1] or -1) end
    if newest >= 0 then old = (newest + c) * S end
  end
  local counts = {}
  for k = 0, c - 1 do
    local want = idx - k
    local j = want % c
    local n = 0
    if ring[2 * j + 1] == want then n = ring[2 * j + 2] or 0 end
    counts[k] = n
  end
  return { counts = counts, ring = ring, old = old, dirty = false }
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
local function decide(st, cost)
  local counts = st.counts
  local full, old, _ = segment(counts, 0)
  local est = full + old * (S - e) / S
  if est + cost <= limit + EPS then
    counts[0] = counts[0] + cost
    st.dirty = true
    return 1, limit - est - cost, reset_after(counts), 0
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
  return 0, limit - est, reset_after(counts), retry
end
local function store(key, st)
  local ring = st.ring
  local j = idx % c
  ring[2 * j + 1] = idx
  ring[2 * j + 2] = st.counts[0]
  local parts = {}
  for x = 1, 2 * c do parts[x] = fmt(ring[x]) end
  -- fresh again when the current sub-window has slid out
  put(key, table.concat(parts, ' '), (idx + c) * S, st.old)
end
"#;

/// The full source of one algorithm's script.
pub(crate) fn source(body: &str) -> String {
    let mut s = String::with_capacity(PROLOGUE.len() + body.len() + EPILOGUE.len());
    s.push_str(PROLOGUE);
    s.push_str(body);
    s.push_str(EPILOGUE);
    s
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
