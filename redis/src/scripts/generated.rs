//! The generated scripts: all-of checks and settlements (forced charges
//! and refunds) over a set of limits, each limit's steps in closures over
//! its own locals.

use super::{Body, body};
use weir_store::Kind;

/// What the generated scripts ([`all_of_check`], [`settle`]) start with:
/// the clock and helpers of [`SKELETON`](super::SKELETON), `ALL` (the whole `ARGV`, which
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
/// [`SKELETON`](super::SKELETON), and `make` (Lua source defining `<name>_<k>` from the
/// block's locals) pasted after them. Returns the source and the number
/// of parameters in all.
fn limit_blocks(
    algorithms: &[Kind],
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
/// [`SKELETON`](super::SKELETON). Each limit's `LOAD`, `DECIDE` and `STORE` run as in
/// [`SKELETON`](super::SKELETON), but inside closures over the limit's own locals (a Lua
/// function call per limit and step, which the single-limit script
/// avoids): every limit is peeked (`commit` false) and, only if all
/// allow, decided again committing — which cannot then deny, as
/// in-process [`AllOf`](weir_rate::AllOf) does. The reply is the server's
/// `now` then `L` records per decision, each limit's own answer (the
/// client combines them as [`Decision::combine`](weir_rate::Decision::combine)
/// does in process).
pub(crate) fn all_of_check(algorithms: &[Kind]) -> String {
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
    else
      -- Refused: nothing is spent, so a limit that would allow reports
      -- what it has left, peeked at no cost.
      {unspent}
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
        unspent = each(
            &|k| format!(
                "if a{k} == 1 then {} = decide_{k}(0, false) end",
                answers(k)
            ),
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
/// ([`Settle::code`]), the cost, the receipt's time (µs) and how long a
/// refund's mark lives (ms). Every limit is charged, or refunded by the
/// receipt, by its `CHARGE` or `REFUND` and written back if that changed
/// it. A refund may name one more key, its mark, after the limits' keys:
/// set with that lifetime when the refund is applied, it turns the same
/// call arriving again into nothing. The reply is the server's `now` (a
/// charge's receipt instant).
pub(crate) fn settle(algorithms: &[Kind]) -> String {
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
-- A refund's mark, a key after the limits' own, says it is done: a call
-- sent again (a cluster client resends one whose reply it lost) gives
-- nothing back twice.
if op == 2 and #KEYS > {limits}
    and not redis.call('SET', KEYS[#KEYS], '', 'NX', 'PX', ALL[P + 4]) then
  return pack('<d', now)
end
local vals = read(KEYS)
{calls}
return pack('<d', now)
"#,
        calls = calls.join("\n"),
        limits = algorithms.len(),
    )
}
