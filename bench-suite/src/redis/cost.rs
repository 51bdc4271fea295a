//! What a decision costs Redis itself, apart from any client. Timings on
//! the development VM move by a third between identical runs, which hides
//! the changes a script is tuned by, so these costs are measured in ways
//! the client and the machine's noise do not reach:
//!
//! * **Instructions** ([`instructions`]): `redis-server` under callgrind,
//!   each algorithm's script sent exactly as its limiter sends it (the call
//!   captured from `SLOWLOG`, so nothing here restates the limiter's
//!   arguments) at 1, 16 and 50 decisions a call, for new keys (created with
//!   an expiry) and busy keys (overwritten in place). Counts repeat to
//!   within a few percent.
//! * **Steps inside a script**: one `EVAL` looping over 10 000 keys per
//!   step, timed by `INFO commandstats`, the bare loop subtracted.
//! * **Ceiling**: `redis-benchmark`, a C client, saturates Redis with
//!   batched calls of bare scripts and of weir's GCRA script: the most
//!   decisions a second this Redis can make, whatever the client.

use super::redis_benchmark::redis_benchmark;
use super::runs::Paths;
use super::{ALGORITHMS, Algorithm, Bench, kps};
use crate::harness::report::{Report, Table, thousands};
use redis::{Connection, Value};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use weir_rate::Quota;
use weir_redis::{FailurePolicy, RedisLimiter, Target};
use weir_test_support::redis_server::{self as testing, RedisServer};

/// A script call as a limiter sends it, for replaying: its script's SHA1
/// and the arguments between the keys and the costs.
#[derive(Debug, Clone)]
struct Captured(String, Vec<String>);

/// How a replayed call passes its costs (every decision costs one unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Costs {
    /// One cost for all, as the limiter sends equal costs.
    One,
    /// One cost per decision, as the limiter sends unequal costs (and as
    /// every call went before equal costs travelled as one: replaying an
    /// older script needs this).
    Each,
}

fn connect(url: &str) -> Result<Connection, String> {
    let client = redis::Client::open(url).map_err(|e| format!("connect: {e}"))?;
    let conn = client.get_connection_with_timeout(Duration::from_secs(30));
    conn.map_err(|e| format!("connect: {e}"))
}

/// The command `args` on `conn`; an error names its first two words.
fn run<T: redis::FromRedisValue>(conn: &mut Connection, args: &[&str]) -> Result<T, String> {
    let reply = redis::cmd(args[0]).arg(&args[1..]).query(conn);
    reply.map_err(|e| format!("{}: {e}", args[..2.min(args.len())].join(" ")))
}

/// The call `limiter` sends to decide one key: with every command logged
/// (`slowlog-log-slower-than 0`), decide once and read the call back from
/// `SLOWLOG`. Leaves the script loaded on the server.
fn capture(
    server: &RedisServer,
    rt: &tokio::runtime::Runtime,
    limiter: &RedisLimiter,
) -> Result<Captured, String> {
    let mut conn = connect(&server.url())?;
    let option = "slowlog-log-slower-than";
    let threshold: Vec<String> = run(&mut conn, &["CONFIG", "GET", option])?;
    run::<()>(&mut conn, &["CONFIG", "SET", option, "0"])?;
    let logged = (|| {
        run::<()>(&mut conn, &["SLOWLOG", "RESET"])?;
        let decided = rt.block_on(limiter.try_check_n("weir-capture", 1));
        let _decision = decided.map_err(|e| format!("the limiter's call failed: {e}"))?;
        run::<Value>(&mut conn, &["SLOWLOG", "GET", "32"])
    })();
    let was = threshold.get(1).map_or("10000", String::as_str);
    run::<()>(&mut conn, &["CONFIG", "SET", option, was])?;
    let Value::Array(entries) = logged? else {
        return Err("unexpected SLOWLOG reply".into());
    };
    let text = |a: &Value| match a {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    // Each entry: id, time, duration, [arguments], client address, name;
    // the call is EVALSHA sha 1 key params… cost.
    let calls = entries.iter().filter_map(|entry| match entry {
        Value::Array(fields) => match fields.get(3) {
            Some(Value::Array(args)) => Some(args.iter().filter_map(text).collect::<Vec<_>>()),
            _ => None,
        },
        _ => None,
    });
    let mut calls =
        calls.filter(|a| a.len() >= 5 && a[0].eq_ignore_ascii_case("EVALSHA") && a[2] == "1");
    let args = calls
        .next()
        .ok_or("the limiter's EVALSHA is not in SLOWLOG")?;
    Ok(Captured(args[1].clone(), args[4..args.len() - 1].to_vec()))
}

/// Decisions per call measured by [`instructions`].
pub const PER_CALL: [usize; 3] = [1, 16, 50];

/// Instructions Redis executes per decision through one script.
#[derive(Debug, Clone)]
pub struct Instructions {
    /// The algorithm whose script ran; `None` for the bare floor.
    pub algorithm: Option<Algorithm>,
    /// One entry per size of [`PER_CALL`].
    pub per_call: Vec<PerCall>,
}

/// Instructions per decision at one call size.
#[derive(Debug, Clone, Copy)]
pub struct PerCall {
    /// Decisions per script call.
    pub decisions: usize,
    /// Per decision on new keys (written with an expiry).
    pub new_key: f64,
    /// Per decision on busy keys (overwritten in place).
    pub busy_key: f64,
}

fn script_name(algorithm: Option<Algorithm>) -> String {
    algorithm.map_or_else(
        || "bare floor: TIME, MGET, SETRANGE a key".to_owned(),
        |a| a.to_string(),
    )
}

/// The least a script keeping per-key state does, a floor beside the
/// algorithms: read the clock, read the keys, overwrite each in place.
const BARE_KEYED: &str = "redis.call('TIME') \
redis.call('MGET', unpack(KEYS)) \
for i = 1, #KEYS do redis.call('SETRANGE', KEYS[i], '0', 'abcdefgh') end \
return ''";

/// A `redis-server` under callgrind, zeroed and dumped by
/// `callgrind_control` around each measured phase.
struct Counted {
    server: RedisServer,
    out_dir: PathBuf,
    pid: u32,
}

impl Counted {
    fn start() -> Result<Self, String> {
        let out_dir = std::env::temp_dir().join(format!("weir-callgrind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out_dir);
        std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
        let out_file = format!("--callgrind-out-file={}/callgrind.%p", out_dir.display());
        // `hz 1`: the server's timer work once a second, not ten times, so
        // idle ticks stay a negligible share of a phase. `DEBUG` (local
        // connections only) turns active expiry off: valgrind slows the
        // server enough for keys to expire mid-measurement otherwise.
        let valgrind = ["valgrind", "--tool=callgrind", "--quiet", &out_file];
        let config = ["--hz", "1", "--enable-debug-command", "local"];
        let server = RedisServer::start_under(&valgrind, &config);
        let server = server.map_err(|e| format!("redis-server under callgrind: {e}"))?;
        let pid = server.pid().ok_or("no server pid")?;
        Ok(Self {
            server,
            out_dir,
            pid,
        })
    }

    /// Instructions executed while `work` runs, from an empty dataset:
    /// every phase then grows the key space through the same sizes, so the
    /// rehashing that growth costs falls alike on every phase.
    fn count(
        &self,
        conn: &mut Connection,
        work: impl FnOnce(&mut Connection) -> Result<(), String>,
    ) -> Result<u64, String> {
        run::<()>(conn, &["FLUSHALL", "SYNC"])?;
        self.control("-z")?;
        work(conn)?;
        let before = self.dumps();
        self.control("-d")?;
        let dump = self
            .dumps()
            .into_iter()
            .find(|p| !before.contains(p))
            .ok_or("callgrind wrote no dump")?;
        let text =
            std::fs::read_to_string(&dump).map_err(|e| format!("{}: {e}", dump.display()))?;
        let totals = |l: &str| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))?
                .trim()
                .parse()
                .ok()
        };
        text.lines()
            .find_map(totals)
            .ok_or_else(|| format!("no totals in {}", dump.display()))
    }

    fn control(&self, what: &str) -> Result<(), String> {
        let mut command = Command::new("callgrind_control");
        command
            .args([what, &self.pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let ok = command.status().is_ok_and(|s| s.success());
        ok.then_some(())
            .ok_or(format!("callgrind_control {what} failed"))
    }

    fn dumps(&self) -> Vec<PathBuf> {
        let entries = std::fs::read_dir(&self.out_dir);
        entries
            .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
            .unwrap_or_default()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.server.kill();
        let _ = std::fs::remove_dir_all(&self.out_dir);
    }
}

/// Instructions per decision for each of `algorithms` (over `quota`, every
/// decision allowed) and the bare floor, replaying calls with `costs`.
///
/// # Errors
///
/// Why it could not run (no valgrind, no server, a failed call).
pub fn instructions(
    rt: &tokio::runtime::Runtime,
    algorithms: &[Algorithm],
    quota: Quota,
    costs: Costs,
) -> Result<Vec<Instructions>, String> {
    if !testing::runs("valgrind") || !testing::runs("callgrind_control") {
        return Err("valgrind is not installed (Debian: `apt-get install valgrind`)".into());
    }
    let counted = Counted::start()?;
    let mut conn = connect(&counted.server.url())?;
    run::<()>(&mut conn, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"])?;
    let mut scripts = Vec::new();
    for &alg in algorithms {
        let builder = alg
            .over(quota)
            .prefix("cg")
            .timeout(Duration::from_secs(30));
        let builder = builder.on_failure(FailurePolicy::Closed);
        let limiter = rt.block_on(builder.connect(Target::server(counted.server.url())));
        let limiter = limiter.map_err(|e| format!("{alg}: {e}"))?;
        scripts.push((Some(alg), capture(&counted.server, rt, &limiter)?));
    }
    let sha = run(&mut conn, &["SCRIPT", "LOAD", BARE_KEYED])?;
    scripts.push((None, Captured(sha, Vec::new())));
    let mut batch_id = 0u64;
    let mut out = Vec::new();
    for (algorithm, Captured(sha, params)) in scripts {
        let mut per_call = Vec::new();
        for n in PER_CALL {
            // About 2 000 decisions a phase, so that the server's own ticks
            // and the dump's overhead stay in the noise.
            let calls = 2_000 / n;
            let mut fresh = || {
                batch_id += 1;
                (0..n)
                    .map(|k| format!("cg:{batch_id}:{{{k}}}"))
                    .collect::<Vec<_>>()
            };
            let batches: [Vec<Vec<String>>; 2] =
                [(); 2].map(|()| (0..calls).map(|_| fresh()).collect());
            let send = |conn: &mut Connection, keys: &[String]| {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&sha).arg(keys.len()).arg(keys).arg(&params);
                match costs {
                    Costs::One => cmd.arg(1),
                    Costs::Each => cmd.arg(vec![1; keys.len()]),
                };
                let reply = cmd.query::<Value>(conn).map(drop);
                reply.map_err(|e| format!("{}: {e}", script_name(algorithm)))
            };
            // Phase A: new keys only. Phase B: each call on new keys, then at
            // once the same keys again (busy keys: the same expiry second,
            // so overwritten in place). Busy = B − A.
            let new = counted.count(&mut conn, |c| {
                batches[0].iter().try_for_each(|k| send(c, k))
            })?;
            let twice = |c: &mut Connection, k: &[String]| send(c, k).and_then(|()| send(c, k));
            let new_then_busy = counted.count(&mut conn, |c| {
                batches[1].iter().try_for_each(|k| twice(c, k))
            })?;
            let decisions = (calls * n) as f64;
            let busy_key = new_then_busy.saturating_sub(new) as f64 / decisions;
            per_call.push(PerCall {
                decisions: n,
                new_key: new as f64 / decisions,
                busy_key,
            });
        }
        out.push(Instructions {
            algorithm,
            per_call,
        });
    }
    Ok(out)
}

/// The [`instructions`] as a table.
pub fn instructions_table(rows: &[Instructions]) -> Table {
    let headers = PER_CALL.map(|n| format!("{n} a call: new key / busy key"));
    let mut t = Table::with_headers(std::iter::once("script".to_owned()).chain(headers));
    let count = |x: f64| thousands(x.round().max(0.0) as u64);
    for r in rows {
        let cells = r
            .per_call
            .iter()
            .map(|c| format!("{} / {}", count(c.new_key), count(c.busy_key)));
        t.cells(std::iter::once(script_name(r.algorithm)).chain(cells));
    }
    t
}

/// What one step costs Redis inside a script, per key: each body runs in a
/// Lua loop over 10 000 keys (`k` is the key, `i` its number), its time
/// read from `INFO commandstats`, the bare loop's subtracted; best of 3.
fn script_steps(server: &RedisServer) -> Vec<(&'static str, Option<f64>)> {
    const STEPS: [(&str, &str); 7] = [
        ("GET of one key", "redis.call('GET', k)"),
        (
            "MGET, per key (256 keys a call)",
            "b[#b + 1] = k if #b == 256 or i == N then redis.call('MGET', unpack(b)) b = {} end",
        ),
        (
            "SETRANGE k '0' of the whole 8-byte value (keeps the expiry)",
            "redis.call('SETRANGE', k, '0', 'abcdefgh')",
        ),
        (
            "SET … KEEPTTL of an 8-byte string",
            "redis.call('SET', k, 'abcdefgh', 'KEEPTTL')",
        ),
        (
            "SET … PXAT of an 8-byte string",
            "redis.call('SET', k, 'abcdefgh', 'PXAT', 4102444800000)",
        ),
        (
            "SET … KEEPTTL of a Lua number (formatted by Redis)",
            "redis.call('SET', k, i + 0.5, 'KEEPTTL')",
        ),
        (
            "SET … KEEPTTL of a packed double (struct.pack)",
            "redis.call('SET', k, struct.pack('<d', i + 0.5), 'KEEPTTL')",
        ),
    ];
    let script = |body: &str| {
        format!(
            "local N = 10000 local b = {{}} for i = 1, N do local k = 'weir-cost:' .. i {body} end return 0"
        )
    };
    let eval_us = |body: &str| -> Option<f64> {
        let once = || {
            server.cli(&["CONFIG", "RESETSTAT"]).ok()?;
            server.cli(&["EVAL", &script(body), "0"]).ok()?;
            let stats = server.command_stats("eval").ok()?;
            // A failed EVAL still answers on stdout: no call, no figure.
            (stats.calls > 0).then_some(stats.usec)
        };
        (0..3)
            .map(|_| once())
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .reduce(f64::min)
    };
    // Create the keys first, so every write overwrites, as a decision does.
    let _ = eval_us("redis.call('SET', k, 'abcdefgh')");
    let bare = eval_us("");
    let per_key = |body| {
        eval_us(body)
            .zip(bare)
            .map(|(t, b)| (t - b).max(0.0) / 10_000.0)
    };
    let out = STEPS
        .iter()
        .map(|(name, body)| (*name, per_key(body)))
        .collect();
    let _ = server.cli(&["EVAL", &script("redis.call('UNLINK', k)"), "0"]);
    out
}

/// The floor of [`BARE_KEYED`] with the limiter keys as fields of one hash
/// (`KEYS[1]`) and their expiry times in a sorted set (`KEYS[2]`), which
/// Redis 7.0 needs for per-field expiry: one read and two writes a call,
/// however many keys.
const BARE_HASH: &str = "local t = redis.call('TIME') \
redis.call('HMGET', KEYS[1], unpack(ARGV)) \
local kv, zs = {}, {} \
for i, f in ipairs(ARGV) do kv[2 * i - 1] = f kv[2 * i] = 'abcdefgh' zs[2 * i - 1] = t[1] zs[2 * i] = f end \
redis.call('HSET', KEYS[1], unpack(kv)) \
redis.call('ZADD', KEYS[2], unpack(zs)) \
return ''";

/// Redis's ceiling for batched calls of 16 and 50 decisions (the batched
/// path's size at 50 callers, and the most 50 closed-loop callers can put
/// into one call): `redis-benchmark` (4 connections, one call each in
/// flight) on random keys of 10 000 until Redis is saturated, best of 3,
/// for the two bare layouts and weir's GCRA script. Returns the table and
/// weir's script's rates. Each script's keys live in their own namespace:
/// GCRA reading the bare script's bytes as an arrival time far in the
/// future would deny everything, and a denial writes nothing.
fn ceiling(
    server: &RedisServer,
    gcra: &Captured,
    quick: bool,
) -> (Table, Vec<(usize, Option<f64>)>) {
    let load = |src| {
        server
            .cli(&["SCRIPT", "LOAD", src])
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let (keyed, hash) = (load(BARE_KEYED), load(BARE_HASH));
    let headers = [16, 50].map(|b| format!("decisions/s at {b} a call"));
    let first = "script (Redis saturated by redis-benchmark)".to_owned();
    let mut t = Table::with_headers(std::iter::once(first).chain(headers));
    let mut weir = Vec::new();
    let rows = [
        (
            "bare, one key per limiter key: TIME, MGET, SETRANGE a key",
            Some((&keyed, &[][..])),
        ),
        (
            "bare, limiter keys as fields of one hash: TIME, HMGET, HSET, ZADD",
            None,
        ),
        ("weir's GCRA script", Some((&gcra.0, &gcra.1[..]))),
    ];
    for (row, (name, keyed)) in rows.into_iter().enumerate() {
        let mut cells = vec![name.to_owned()];
        for per_call in [16, 50] {
            // Runs of about a second (a third of one when quick): shorter
            // ones measure redis-benchmark's start-up more than Redis.
            let calls = (if quick { 100_000 } else { 300_000 } / per_call).to_string();
            let mut args: Vec<String> = ["-c", "4", "-n", &calls, "-r", "10000", "EVALSHA"]
                .map(String::from)
                .into();
            let keys = |key: String| std::iter::repeat_n(key, per_call);
            let ns = format!("ceil{row}");
            match keyed {
                // The limiter keys in KEYS, then the parameters and one cost.
                Some((sha, params)) => {
                    args.extend([sha.clone(), per_call.to_string()]);
                    args.extend(keys(format!("{ns}:{{k__rand_int__}}")));
                    args.extend(params.iter().cloned().chain(["1".into()]));
                }
                // The hash and its expiry set in KEYS, the limiter keys in ARGV.
                None => {
                    args.extend([
                        hash.clone(),
                        "2".into(),
                        format!("{ns}:{{h}}"),
                        format!("{ns}:{{h}}:exp"),
                    ]);
                    args.extend(keys("k__rand_int__".to_owned()));
                }
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let rates = (0..3).filter_map(|_| redis_benchmark(server.port(), &args));
            let rate = rates
                .map(|calls_per_sec| calls_per_sec * per_call as f64)
                .reduce(f64::max);
            if row == 2 {
                weir.push((per_call, rate));
            }
            cells.push(rate.map_or_else(|| "failed".into(), kps));
        }
        t.cells(cells);
    }
    (t, weir)
}

/// What the goals read from this part.
pub(super) struct Inside {
    /// Instructions per decision, per algorithm.
    pub(super) instructions: Result<Vec<Instructions>, String>,
    /// GCRA's ceiling: (decisions a call, decisions per second).
    pub(super) gcra_ceiling: Vec<(usize, Option<f64>)>,
}

/// The section's part inside Redis, over `roomy`.
pub(super) fn section(
    report: &mut Report,
    bench: &Bench<'_>,
    paths: &Paths,
    roomy: Quota,
) -> Inside {
    report.progress("per-key steps inside a script");
    let mut t = Table::new("one step inside a script | Redis time per key");
    for (name, us) in script_steps(bench.server) {
        t.cells([
            name.to_owned(),
            us.map_or_else(|| "failed".into(), |us| format!("{us:.2} µs")),
        ]);
    }
    report.text(
        "What a script deciding many keys still pays per key, measured in one EVAL looping over \
         10 000 keys (`INFO commandstats`, the bare loop subtracted, best of 3). Every allowed decision \
         writes its key once, so the batched path's Redis time per decision cannot fall below a write \
         plus a share of `MGET`, however many keys a call decides. The scripts overwrite a busy key \
         in place with `SETRANGE` (its expiry kept) and set a new expiry only when it moves.",
    );
    report.table(&t);

    report.progress("Redis instructions per decision (callgrind)");
    let instructions = instructions(bench.rt, &ALGORITHMS, roomy, Costs::One);
    match &instructions {
        Ok(rows) => {
            report.text(
                "Instructions Redis executes per decision, counted by callgrind (within a few percent from \
                 run to run, where timings on this VM move by a third): each algorithm's script sent exactly as its limiter sends \
                 it, at 1 decision a call (the plain path) and 16 or 50 (the batched path), for new keys \
                 (written with an expiry) and busy keys (decided again at once: overwritten in place). \
                 Everything the server does for a call counts, from reading the request to writing the \
                 reply; the kernel's share of the socket calls does not.",
            );
            report.table(&instructions_table(rows));
        }
        Err(e) => report.text(&format!("Instructions per decision: **skipped**: {e}.")),
    }

    report.progress("Redis's ceiling for batched calls");
    let gcra = paths
        .gcra
        .as_ref()
        .ok_or("no plain GCRA limiter connected".to_owned());
    let quick = report.scale() == crate::harness::report::Scale::Quick;
    let (ceilings, gcra_ceiling) = match gcra.and_then(|l| capture(bench.server, bench.rt, l)) {
        Ok(call) => ceiling(bench.server, &call, quick),
        Err(e) => (
            Table::with_headers([format!("ceiling not measured: {e}")]),
            Vec::new(),
        ),
    };
    report.text(
        "Redis's own ceiling for a batched call, with the client out of the way: `redis-benchmark` \
         (C, 4 connections, one call each in flight) sends script calls of 16 or 50 decisions on random \
         keys of 10 000 until Redis is saturated (best of 3). The bare scripts do only what any \
         script keeping per-key state must: read the clock, read the keys, write each one back. 50 \
         closed-loop callers can never put more than 50 decisions into one call.",
    );
    report.table(&ceilings);
    Inside {
        instructions,
        gcra_ceiling,
    }
}
