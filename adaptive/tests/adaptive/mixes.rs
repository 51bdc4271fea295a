//! Origins whose requests differ in cost, and clients that use it: the
//! no-load latency and the limit must not follow a minority of cheap,
//! slow or never-finishing requests. A deterministic simulation, like the
//! single-cost origin's.

use super::*;

/// What a request asks of the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The origin's real work: `service` ± 10 % on a worker.
    Expensive,
    /// 50 times less work, on a worker (a cache hit, a tiny answer).
    Cheap,
    /// A missing path: answered at once, no worker (a hostile client's).
    NotFound,
}

/// One stretch of a run: how long, the origin's workers, and the share of
/// honest requests that are cheap.
#[derive(Debug, Clone, Copy)]
struct Phase {
    len: u64,
    workers: usize,
    cheap: f64,
}

/// Requests that finished: (finish time, latency, kind).
#[derive(Debug, Default)]
struct Served(Vec<(u64, u64, Kind)>);

impl Served {
    fn expensive(&self, from: u64, to: u64) -> Vec<u64> {
        let mut l: Vec<u64> = self
            .0
            .iter()
            .filter(|&&(t, _, k)| k == Kind::Expensive && t >= from && t < to)
            .map(|&(_, l, _)| l)
            .collect();
        l.sort_unstable();
        l
    }
}

/// Runs `phases` of an origin with `service` per expensive request,
/// offered honest requests at `rate` per second (Poisson) and, when
/// `hostile` > 0, that share of all requests from one client as bursts of
/// 40 instant 404s, 1 ms apart. The limiter admits while fewer than its
/// limit are in flight; 404s teach it like any other answer (a layer
/// counts them as successes).
fn run(
    algorithm: &mut impl Algorithm,
    phases: &[Phase],
    rate: f64,
    service: u64,
    hostile: f64,
) -> Served {
    const BURST: u64 = 40;
    let end: u64 = phases.iter().map(|p| p.len).sum();
    let phase_at = |t: u64| {
        let mut edge = 0;
        for p in phases {
            edge += p.len;
            if t < edge {
                return *p;
            }
        }
        phases[phases.len() - 1]
    };
    let burst_every = (hostile > 0.0).then(|| {
        let per_second = rate * hostile / (1.0 - hostile);
        (BURST as f64 / per_second * 1e9) as u64
    });
    let mut served = Served::default();
    // By finish time: (start, in flight at start, kind).
    let mut busy: BTreeMap<(u64, u64), (u64, u32, Kind)> = BTreeMap::new();
    let mut queue: VecDeque<(u64, u32, Kind)> = VecDeque::new();
    let (mut in_flight, mut working, mut seq) = (0u32, 0usize, 0u64);
    let mut rng = Rng(service ^ rate as u64 ^ hostile.to_bits());
    let spacing = 1e9 / rate;
    let mut next_honest = 0u64;
    let mut next_hostile = burst_every.map_or(u64::MAX, |every| every / 2);
    let mut hostile_sent = 0u64;
    loop {
        let next_finish = busy.keys().next().map(|k| k.0).unwrap_or(u64::MAX);
        let now = next_finish.min(next_honest).min(next_hostile);
        if now >= end {
            break;
        }
        if now == next_finish {
            let key = *busy.keys().next().unwrap();
            let (start, at_start, kind) = busy.remove(&key).unwrap();
            in_flight -= 1;
            if kind != Kind::NotFound {
                working -= 1;
            }
            served.0.push((now, now - start, kind));
            let sample = Sample::new(
                Duration::from_nanos(now - start),
                Outcome::Success,
                at_start,
            );
            algorithm.update(at(now), sample);
        } else {
            let kind = if now == next_hostile {
                hostile_sent += 1;
                next_hostile = match burst_every {
                    Some(every) if hostile_sent.is_multiple_of(BURST) => {
                        now - (BURST - 1) * MS + every
                    }
                    _ => now + MS,
                };
                Kind::NotFound
            } else {
                next_honest += (-(1.0 - rng.unit()).ln() * spacing) as u64;
                if rng.unit() < phase_at(now).cheap {
                    Kind::Cheap
                } else {
                    Kind::Expensive
                }
            };
            if in_flight < algorithm.limit() {
                in_flight += 1;
                if kind == Kind::NotFound {
                    seq += 1;
                    busy.insert((now + MS / 20, seq), (now, in_flight, kind));
                } else {
                    queue.push_back((now, in_flight, kind));
                }
            }
        }
        while working < phase_at(now).workers {
            let Some((start, at_start, kind)) = queue.pop_front() else {
                break;
            };
            let work = match kind {
                Kind::Cheap => service / 50,
                _ => (service as f64 * (0.9 + 0.2 * rng.unit())) as u64,
            };
            seq += 1;
            working += 1;
            busy.insert((now + work, seq), (start, at_start, kind));
        }
    }
    served
}

/// Runs `phases` at three times the honest capacity of the first phase
/// and judges each phase from 2 s after it starts: expensive requests
/// served within the SLO (twice their unloaded p99, 2 × `service`) at
/// 95 % or more of what the workers allow with that phase's mix, and
/// their p99 within the SLO.
fn judge_mix(name: &str, algorithm: &mut impl Algorithm, phases: &[Phase], hostile: f64) {
    const S: u64 = 20 * MS;
    const SEC: u64 = 1_000_000_000;
    // Expensive requests per second the workers allow at a cheap share.
    let allowed = |p: &Phase| {
        let work = (1.0 - p.cheap) * S as f64 + p.cheap * (S / 50) as f64;
        p.workers as f64 * 1e9 / work * (1.0 - p.cheap)
    };
    let offered = 3.0 * allowed(&phases[0]) / (1.0 - phases[0].cheap);
    let served = run(algorithm, phases, offered, S, hostile);
    let slo = 2 * S;
    let mut start = 0;
    for (i, p) in phases.iter().enumerate() {
        let (from, to) = (start + 2 * SEC, start + p.len);
        start += p.len;
        let latencies = served.expensive(from, to);
        let good = latencies.iter().filter(|&&l| l <= slo).count() as f64;
        let goodput = good * 1e9 / (to - from) as f64;
        let p99 = latencies
            .get(((latencies.len() as f64 - 1.0) * 0.99) as usize)
            .copied()
            .unwrap_or(u64::MAX);
        eprintln!(
            "{name} phase {i} ({} workers, {:.0} % cheap): expensive goodput {goodput:.0}/s of \
             {:.0}/s, p99 {:.1} ms",
            p.workers,
            100.0 * p.cheap,
            allowed(p),
            p99 as f64 / MS as f64
        );
        assert!(
            goodput >= 0.95 * allowed(p),
            "{name}, phase {i}: expensive goodput {goodput:.0}/s of {:.0}/s",
            allowed(p)
        );
        assert!(
            p99 <= slo,
            "{name}, phase {i}: p99 {:.1} ms over the SLO",
            p99 as f64 / MS as f64
        );
    }
}

const SEC: u64 = 1_000_000_000;

fn halved(cheap: f64) -> [Phase; 3] {
    [(32, cheap), (16, cheap), (32, cheap)].map(|(workers, cheap)| Phase {
        len: 4 * SEC,
        workers,
        cheap,
    })
}

fn defaults() -> [(&'static str, AnyAlgorithm); 3] {
    [
        ("AIMD", AnyAlgorithm::Aimd(Aimd::default())),
        ("Vegas", AnyAlgorithm::Vegas(Vegas::default())),
        ("Gradient2", AnyAlgorithm::Gradient2(Gradient2::default())),
    ]
}

/// The review's case: one learned limit shared by everyone, an origin
/// whose real work takes 5 ms, and one client's burst of 40 instant 404s
/// (1 ms apart) among honest traffic. Fed to the window as successes,
/// they made the no-load latency a twentieth of the real one, and every
/// honest window after looked overloaded: the shared limit fell from 20
/// to 2. It must stay at least half of what it was.
#[test]
fn one_clients_instant_404s_do_not_collapse_a_shared_limit() {
    for (name, mut algorithm) in defaults() {
        let honest = |a: &mut AnyAlgorithm, from: u64, count: u64| {
            for i in 0..count {
                let start = from + i * 5 * MS;
                a.update(
                    at(start + 5 * MS),
                    Sample::new(Duration::from_millis(5), Outcome::Success, 1),
                );
            }
            from + count * 5 * MS
        };
        let t = honest(&mut algorithm, 0, 400);
        let before = algorithm.limit();
        for i in 0..40 {
            let start = t + i * MS;
            let instant = Sample::new(Duration::from_micros(50), Outcome::Success, 2);
            algorithm.update(at(start + MS / 20), instant);
        }
        honest(&mut algorithm, t, 300);
        let after = algorithm.limit();
        assert!(
            after >= before / 2,
            "{name}: the shared limit fell from {before} to {after}"
        );
    }
}

/// A mix of expensive requests and 30 % fifty times cheaper ones, at 3×
/// overload, the workers halved and restored.
#[test]
fn a_mixed_cost_origin_is_held_at_capacity() {
    for (name, mut algorithm) in defaults() {
        judge_mix(name, &mut algorithm, &halved(0.3), 0.0);
    }
}

/// One client sends a tenth of the offered load as bursts of instant 404s.
#[test]
fn a_hostile_clients_404_bursts_leave_the_limit_to_the_origin() {
    for (name, mut algorithm) in defaults() {
        judge_mix(name, &mut algorithm, &halved(0.0), 0.1);
    }
}

/// The cheap share goes from none to half and back, while the workers
/// are halved and restored.
#[test]
fn a_shifting_mix_moves_the_limit_only_as_far_as_the_work() {
    let phases =
        [(32, 0.0), (32, 0.5), (16, 0.5), (32, 0.5), (32, 0.0)].map(|(workers, cheap)| Phase {
            len: 3 * SEC,
            workers,
            cheap,
        });
    for (name, mut algorithm) in defaults() {
        judge_mix(name, &mut algorithm, &phases, 0.0);
    }
}

/// Requests that never finish hold their places, and teach nothing: the
/// limit learned from the others does not move, and a client holding
/// places can take no more than they are.
#[test]
fn requests_that_never_finish_do_not_move_the_limit() {
    for (name, mut algorithm) in defaults() {
        // Honest 10 ms requests, 20 in flight, for 2 s: the limit settles.
        let mut t = 0;
        for _ in 0..4000 {
            t += MS / 2;
            algorithm.update(
                at(t),
                Sample::new(Duration::from_millis(10), Outcome::Success, 20),
            );
        }
        let before = algorithm.limit();
        // A client now holds 15 places for ever: the honest requests see
        // more in flight at their start, and the same latency.
        for _ in 0..4000 {
            t += MS / 2;
            algorithm.update(
                at(t),
                Sample::new(Duration::from_millis(10), Outcome::Success, 35),
            );
        }
        let after = algorithm.limit();
        assert!(
            after >= before,
            "{name}: held places lowered the limit from {before} to {after}"
        );
    }
}
