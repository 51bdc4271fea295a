//! How a tuple becomes twelve sketch keys: its digest (addresses masked per
//! scope, IPv6 folded into one word), then one keyed hash per
//! generalisation. `hhh/bpf/filter.c` computes the same words bit for bit.

use crate::lattice::{AddrScope, GENERALISATIONS, Generalisation, PortScope};
use crate::tuple::FourTuple;
use weir_limits::sketch::ROW_MULTIPLIERS;
use weir_primitives::random::SplitMix64;

/// The folded 64×64→128-bit multiply (as in wyhash): a cheap, good mixer of
/// two words, used once per packet to fold an IPv6 address into one word.
#[inline(always)]
pub(super) fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Multipliers of [`mix`], taken from weir-limits: odd, with well-spread
/// bits. `filter.c` spells the same two numbers; the kernel tests fail if
/// they drift.
const MIX_MULTIPLIERS: (u64, u64) = (SplitMix64::GOLDEN, ROW_MULTIPLIERS[4]);

/// The per-generalisation hash of two keyed words: multiply, xor, multiply,
/// fold the high half onto the low. It runs twelve times per packet, and the
/// BPF filter must compute it too: BPF has no 64×64→128-bit multiply, so
/// [`mum`] would cost it four multiplies and a dozen adds per call, where
/// this costs two multiplies. For a fixed first word it is a bijection of
/// the second (so IPv4 tuples that differ only in ports or destination,
/// packed into that word without loss, never share a hash); across first
/// words, collisions depend on the first key.
#[inline(always)]
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let h = (a.wrapping_mul(MIX_MULTIPLIERS.0) ^ b).wrapping_mul(MIX_MULTIPLIERS.1);
    h ^ (h >> 32)
}

/// Per-family hash keys: one pair per generalisation, plus the keys that
/// fold IPv6 addresses into one word.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) v4: [(u64, u64); GENERALISATIONS],
    pub(crate) v6: [(u64, u64); GENERALISATIONS],
    pub(crate) v6_addr: (u64, u64),
}

impl Keys {
    pub(super) fn new(seed: u64) -> Self {
        let mut numbers = weir_primitives::random::SplitMix64::new(seed);
        // Odd and with both halves busy, so the multiply mixes well.
        let mut next = || numbers.next_u64() | 1;
        let mut v4 = [(0, 0); GENERALISATIONS];
        let mut v6 = [(0, 0); GENERALISATIONS];
        for k in v4.iter_mut().chain(v6.iter_mut()) {
            *k = (next(), next());
        }
        Self {
            v4,
            v6,
            v6_addr: (next(), next()),
        }
    }
}

/// What a generalisation needs of a tuple: the source digest for each
/// address scope, the destination digest, and the ports.
#[derive(Debug, Clone, Copy)]
pub(super) struct Digest {
    src: [u64; 3],
    dst: u64,
    sport: u64,
    dport: u64,
}

/// The words a tuple's generalisations are hashed from.
#[inline(always)]
pub(super) fn digest<'k>(
    keys: &'k Keys,
    v4_masks: &[u32; 3],
    v6_masks: &[u128; 3],
    tuple: &FourTuple,
) -> (Digest, &'k [(u64, u64); GENERALISATIONS]) {
    match tuple {
        FourTuple::V4(t) => {
            let s = u32::from(t.src);
            let m = v4_masks;
            (
                Digest {
                    src: [
                        u64::from(s & m[0]),
                        u64::from(s & m[1]),
                        u64::from(s & m[2]),
                    ],
                    dst: u64::from(u32::from(t.dst)),
                    sport: u64::from(t.src_port),
                    dport: u64::from(t.dst_port),
                },
                &keys.v4,
            )
        }
        FourTuple::V6(t) => {
            let (k0, k1) = keys.v6_addr;
            let fold = |a: u128| mum(a as u64 ^ k0, (a >> 64) as u64 ^ k1);
            let s = u128::from(t.src);
            let m = v6_masks;
            (
                Digest {
                    src: [fold(s & m[0]), fold(s & m[1]), fold(s & m[2])],
                    dst: fold(u128::from(t.dst)),
                    sport: u64::from(t.src_port),
                    dport: u64::from(t.dst_port),
                },
                &keys.v6,
            )
        }
    }
}

/// The key hash of generalisation `g` of a digested tuple.
#[inline(always)]
pub(super) fn generalised_hash<const G: usize>(d: &Digest, (k0, k1): (u64, u64)) -> u64 {
    let node = const { Generalisation::ALL[G] };
    let src = d.src[match node.src {
        AddrScope::Exact => 0,
        AddrScope::Subnet => 1,
        AddrScope::Any => 2,
    }];
    let sport = match node.src_port {
        PortScope::Exact => d.sport,
        PortScope::Any => 0,
    };
    let dport = match node.dst_port {
        PortScope::Exact => d.dport,
        PortScope::Any => 0,
    };
    // For IPv4 the second word is (sport, dport, dst) packed without loss.
    mix(src ^ k0, (d.dst ^ (sport << 48) ^ (dport << 32)) ^ k1)
}

/// [`generalised_hash`] for a generalisation chosen at run time.
pub(super) fn generalised_hash_dyn(g: usize, d: &Digest, key: (u64, u64)) -> u64 {
    type HashFn = fn(&Digest, (u64, u64)) -> u64;
    const HASHES: [HashFn; GENERALISATIONS] = [
        generalised_hash::<0>,
        generalised_hash::<1>,
        generalised_hash::<2>,
        generalised_hash::<3>,
        generalised_hash::<4>,
        generalised_hash::<5>,
        generalised_hash::<6>,
        generalised_hash::<7>,
        generalised_hash::<8>,
        generalised_hash::<9>,
        generalised_hash::<10>,
        generalised_hash::<11>,
    ];
    HASHES[g % GENERALISATIONS](d, key)
}
