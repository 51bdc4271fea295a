// SPDX-License-Identifier: MIT OR Apache-2.0
//
// weir-hhh's flood filter as a BPF socket filter: the same algorithm, hash,
// sketch layout and fixed-point EWMA as the user-space `Classifier`
// (hhh/src/classifier/), so that the two agree packet for packet when
// given the same time and coin. Everything that must match user space (hash
// keys, prefixes, lattice, EWMA constants, row multipliers) comes from the
// read-only global `weir_cfg`, set by `weir_hhh::kernel::KernelFilter`
// before the program is loaded; this file holds only the arithmetic.
//
// Framing: attached to a UDP socket, the filter runs with skb->data at the
// UDP header (the IP layer has pulled its header); under BPF_PROG_TEST_RUN
// skb->data is at the IP header. Every read is therefore relative to the
// network header (BPF_HDR_START_NET), which is the IP header in both cases.
//
// What cannot be attributed to a source (not IP, or shorter than its
// addresses) is passed whole; everything else is classified, by its
// addresses alone when its ports cannot be reached (see `parse`). The
// filter only ever drops packets it has classified.
//
// Coalesced datagrams: on a socket with UDP_GRO the kernel hands the filter
// one buffer per run of datagrams of one flow (gso_segs of them). The
// buffer counts as that many events at one instant (each cell decays once,
// then gains that many events' worth; an idle cell restarts at the first of
// them, then gains the rest), and its verdict passes or drops it whole, so
// a flood sent in runs is measured at its true rate. The stats count
// datagrams.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GENERALISATIONS 12
#define LEVELS 5
// Cells per key the kernel supports (the user-space classifier allows 16;
// the loader rejects more than this with a typed error).
#define MAX_HASHES 8
#define MAX_EXTENSION_HEADERS 8
#define IPPROTO_UDP_ 17

// Flags of `weir_state.flags`.
#define FLAG_REPLAY_CLOCK 1 // time from `weir_state.now`, not bpf_ktime_get_ns
#define FLAG_REPLAY_COIN 2  // coin from `weir_state.coin`, not bpf_get_prandom_u32

// Flags of `lattice_node.flags`.
#define KEEP_SPORT 1
#define KEEP_DPORT 2
#define LAST_IN_LEVEL 4

struct weir_level {
	__u64 window; // EWMA window, ns
	__u64 recip;  // floor((2^64 - 1) / window)
	__u64 inc;    // what one event adds (FixedRate bits)
};

// Written once at load; mirrored by `Config` in hhh/src/kernel.rs.
struct weir_config {
	__u64 hashes;
	__u64 slots;       // rows: cells per row; blocked: number of 8-cell blocks
	__u64 slots_shift; // 64 - log2(slots) when slots is a power of two >= 2, else 0
	__u64 blocked;     // 1: weir-limits' Layout::Blocked, 0: Layout::Rows
	__u64 cells_per_sketch;
	__u64 one_per_ns; // FixedRate bits of 10^9 events/s (the idle-cell update's numerator)
	__u64 v6_fold[2];
	__u64 v4_mask[3];
	__u64 v6_mask_hi[3];
	__u64 v6_mask_lo[3];
	__u64 row_mult[MAX_HASHES];
	__u64 keys_v4[GENERALISATIONS][2];
	__u64 keys_v6[GENERALISATIONS][2];
	struct weir_level levels[LEVELS];
};

// Changed at run time; mirrored by `State`.
struct weir_state {
	__u64 limit; // FixedRate bits
	__u64 flags;
	__u64 now;
	__u64 coin;
};

// Per CPU; mirrored by `RawStats`.
struct weir_stats {
	__u64 unlimited;
	__u64 passed[LEVELS];
	__u64 dropped[LEVELS];
	__u64 unparsed;      // passed unclassified: not IP, or shorter than its addresses
	__u64 ports_unknown; // classified by their addresses alone (also in the counts above)
};

_Static_assert(sizeof(struct weir_config) == 704, "mirror of Config in hhh/src/kernel.rs");
_Static_assert(sizeof(struct weir_state) == 32, "mirror of State");
_Static_assert(sizeof(struct weir_stats) == 104, "mirror of RawStats");

struct weir_cell {
	__u64 rate;
	__u64 stamp;
};

// The configuration lives in .rodata, set by the loader before the program
// is verified: the verifier then knows every field as a constant (the loop
// bounds, the lattice, the layout), follows only the branches that can be
// taken and removes the rest, which keeps verification small enough to
// inline everything and leaves less code to run per packet.
const volatile struct weir_config weir_cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_state);
} weir_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_stats);
} weir_stats SEC(".maps");

// Sized by the loader: 12 sketches of `cells_per_sketch` cells.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_cell);
} weir_cells SEC(".maps");

struct tuple {
	__u64 src[3]; // source digest per address scope
	__u64 dst;
	__u64 sport;
	__u64 dport;
	int v6;
};

// High 64 bits of a 64x64-bit product (BPF has no 128-bit multiply).
static __always_inline __u64 mulhi(__u64 a, __u64 b)
{
	__u64 a0 = (__u32)a, a1 = a >> 32, b0 = (__u32)b, b1 = b >> 32;
	__u64 p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
	__u64 mid = (p00 >> 32) + (__u32)p01 + (__u32)p10;
	return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

// The classifier's `mum`: the 128-bit product folded into 64 bits.
static __always_inline __u64 mum(__u64 a, __u64 b)
{
	return (a * b) ^ mulhi(a, b);
}

// The classifier's `mix`: the per-generalisation hash, two multiplies
// (`mum` would cost four here, BPF having no 128-bit product). The
// multipliers are weir-limits' `SplitMix64::GOLDEN` and `ROW_MULTIPLIERS[4]`
// (`MIX_MULTIPLIERS` in hhh/src/classifier/hashing.rs).
static __always_inline __u64 mix(__u64 a, __u64 b)
{
	__u64 h = (a * 0x9e3779b97f4a7c15ULL ^ b) * 0xd6e8feb86659fd93ULL;
	return h ^ (h >> 32);
}

// Big-endian loads from the parse buffers. Every call site reads at an
// offset aligned to the width from a buffer aligned to 8 (`ALIGNED`), so
// each is one load and one byte swap (clang would otherwise assemble the
// value a byte at a time).
#define ALIGNED __attribute__((aligned(8)))

static __always_inline __u64 load_be64(const __u8 *p)
{
	__u64 v;
	__builtin_memcpy(&v, __builtin_assume_aligned(p, 8), 8);
	return bpf_be64_to_cpu(v);
}

static __always_inline __u32 load_be32(const __u8 *p)
{
	__u32 v;
	__builtin_memcpy(&v, __builtin_assume_aligned(p, 4), 4);
	return bpf_ntohl(v);
}

static __always_inline __u16 load_be16(const __u8 *p)
{
	__u16 v;
	__builtin_memcpy(&v, __builtin_assume_aligned(p, 2), 2);
	return bpf_ntohs(v);
}

static __always_inline int load(struct __sk_buff *skb, __u32 at, void *to, __u32 len)
{
	return bpf_skb_load_bytes_relative(skb, at, to, len, BPF_HDR_START_NET);
}

// What `parse` returns.
#define ATTRIBUTED 0      // `t` filled: the ports, or both 0 (`UNKNOWN_PORT`)
#define NOT_ATTRIBUTED -1 // not IP, or shorter than its addresses: pass it

static __always_inline void v4_addresses(const volatile struct weir_config *cfg, struct tuple *t,
					 const __u8 *buf)
{
	__u64 s = load_be32(buf + 12);
	t->src[0] = s & cfg->v4_mask[0];
	t->src[1] = s & cfg->v4_mask[1];
	t->src[2] = s & cfg->v4_mask[2];
	t->dst = load_be32(buf + 16);
	t->v6 = 0;
}

static __always_inline void v6_addresses(const volatile struct weir_config *cfg, struct tuple *t,
					 const __u8 *buf)
{
	__u64 s_hi = load_be64(buf + 8), s_lo = load_be64(buf + 16);
	__u64 d_hi = load_be64(buf + 24), d_lo = load_be64(buf + 32);
	__u64 k0 = cfg->v6_fold[0], k1 = cfg->v6_fold[1];
#pragma unroll
	for (int i = 0; i < 3; i++)
		t->src[i] = mum((s_lo & cfg->v6_mask_lo[i]) ^ k0, (s_hi & cfg->v6_mask_hi[i]) ^ k1);
	t->dst = mum(d_lo ^ k0, d_hi ^ k1);
	t->v6 = 1;
}

// `FourTuple::attribute`, check for check: what can be attributed to a
// source is never passed unclassified, so a packet whose addresses are
// present is classified by them, with its ports when its UDP header can be
// reached and with both ports 0 otherwise (a later fragment, another
// protocol, more than MAX_EXTENSION_HEADERS extension headers, lengths that
// end first). The UDP header is looked for within the datagram the IP
// header delimits; those lengths are trusted to be present (the IP layer
// has checked them before any socket filter runs, and probing the packet's
// end would fail on paged socket buffers), and only the headers are read.
//
// The ordinary packet takes the straight path to its ports; every way of
// missing them jumps to the addresses-only ending of its family, which also
// counts the packet in `ports_unknown`, so that the rule costs ordinary
// packets nothing (the caller's test is the one it always had).
static __always_inline int parse(struct __sk_buff *skb, const volatile struct weir_config *cfg,
				 struct tuple *t, struct weir_stats *stats, __u64 events)
{
	__u8 buf[48] ALIGNED;
	__u32 have;

	// One helper call in the common case: the socket's protocol says how
	// much to read; the version nibble still decides.
	if (skb->protocol == bpf_htons(ETH_P_IPV6) && load(skb, 0, buf, 48) == 0) {
		have = 48;
	} else if (load(skb, 0, buf, 28) == 0) {
		have = 28;
	} else {
		// Too short for an IPv4 header and a UDP header: at most an
		// IPv4 header's addresses.
		if (load(skb, 0, buf, 20) || buf[0] >> 4 != 4)
			return NOT_ATTRIBUTED;
		goto v4_unknown;
	}
	__u8 version = buf[0] >> 4;
	if (version == 4) {
		__u32 header = (buf[0] & 0x0f) * 4;
		if (header < 20)
			goto v4_unknown;
		__u32 total = load_be16(buf + 2);
		if (header + 8 > total)
			goto v4_unknown;
		if (load_be16(buf + 6) & 0x1fff)
			goto v4_unknown;
		if (buf[9] != IPPROTO_UDP_)
			goto v4_unknown;
		__u8 options_udp[8] ALIGNED;
		const __u8 *udp = buf + 20; // 4-aligned: the loads below are 2 wide
		if (header != 20) {
			if (load(skb, header, options_udp, 8))
				goto v4_unknown;
			udp = options_udp;
		}
		v4_addresses(cfg, t, buf);
		t->sport = load_be16(udp);
		t->dport = load_be16(udp + 2);
		return ATTRIBUTED;
	}
	if (version != 6)
		return NOT_ATTRIBUTED;
	if (have < 48) {
		if (load(skb, 0, buf, 48) == 0)
			have = 48;
		else if (load(skb, 0, buf, 40) == 0)
			goto v6_unknown; // no room for a UDP header
		else
			return NOT_ATTRIBUTED;
	}
	__u32 end = 40 + (__u32)load_be16(buf + 4);
	__u8 next = buf[6];
	__u32 at = 40;
	__u8 ext[8] ALIGNED;
	__builtin_memcpy(ext, buf + 40, 8);
	// Walk at most MAX_EXTENSION_HEADERS, like the user-space parser; the
	// bound also lets the verifier see the loop end. Past it, or at any
	// header that cannot be walked, the ports stay unknown.
	for (int walked = 0; walked <= MAX_EXTENSION_HEADERS; walked++) {
		if (next == IPPROTO_UDP_)
			break;
		if (walked == MAX_EXTENSION_HEADERS)
			goto v6_unknown;
		if (at + 8 > end)
			goto v6_unknown;
		if (at != 40 && load(skb, at, ext, 8))
			goto v6_unknown;
		__u32 len;
		switch (next) {
		case 0:
		case 43:
		case 60:
			len = ((__u32)ext[1] + 1) * 8;
			break;
		case 44:
			// A later fragment carries no UDP header.
			if (load_be16(ext + 2) >> 3)
				goto v6_unknown;
			len = 8;
			break;
		case 51:
			len = ((__u32)ext[1] + 2) * 4;
			break;
		default:
			goto v6_unknown;
		}
		if (at + len > end)
			goto v6_unknown;
		next = ext[0];
		at += len;
	}
	if (next != IPPROTO_UDP_)
		goto v6_unknown;
	if (at + 8 > end)
		goto v6_unknown;
	__u8 after_ext[8] ALIGNED;
	const __u8 *udp = buf + 40;
	if (at != 40) {
		if (load(skb, at, after_ext, 8))
			goto v6_unknown;
		udp = after_ext;
	}
	v6_addresses(cfg, t, buf);
	t->sport = load_be16(udp);
	t->dport = load_be16(udp + 2);
	return ATTRIBUTED;

v4_unknown:
	v4_addresses(cfg, t, buf);
	t->sport = 0;
	t->dport = 0;
	stats->ports_unknown += events;
	return ATTRIBUTED;
v6_unknown:
	v6_addresses(cfg, t, buf);
	t->sport = 0;
	t->dport = 0;
	stats->ports_unknown += events;
	return ATTRIBUTED;
}

// weir-limits' `within_window` update: the old rate kept for `keep` of the
// window (a 32-bit fraction of it, from the reciprocal), plus one event,
// saturating.
static __always_inline __u64 decay_add(__u64 old, __u64 keep, __u64 recip, __u64 inc)
{
	__u64 frac = (keep * recip) >> 32;
	__u64 kept = (old >> 32) * frac + (((old & 0xffffffffULL) * frac) >> 32);
	__u64 rate = kept + inc;
	return rate < kept ? ~0ULL : rate;
}

// a·b, or the largest value if that does not fit.
static __always_inline __u64 mul_sat(__u64 a, __u64 b)
{
	// Not `p / b != a`: clang turns that into a 128-bit multiply, which
	// BPF lacks.
	return mulhi(a, b) ? ~0ULL : a * b;
}

// a + b, or the largest value if that does not fit.
static __always_inline __u64 add_sat(__u64 a, __u64 b)
{
	__u64 s = a + b;
	return s < a ? ~0ULL : s;
}

// The classifier's `touch_cell`: one event now, plus `more` events' worth
// of rate at the same instant (0 but for a coalesced buffer's other
// datagrams); returns the new rate. The level's constants arrive as values,
// read once per generalisation; `inc` is what all the events add.
static __always_inline __u64 touch(__u64 window, __u64 recip, __u64 inc, __u64 one_per_ns,
				   struct weir_cell *cell, __u64 now, __u64 more)
{
	__u64 old = cell->rate, stamp = cell->stamp;
	// One unsigned comparison catches both rare cases: a cell idle for a
	// window or more, and time behind the cell's (the difference wraps).
	__u64 elapsed = now - stamp;
	__u64 rate;
	if (__builtin_expect(elapsed < window, 1)) {
		rate = decay_add(old, window - elapsed, recip, inc);
		cell->stamp = now;
	} else if (now < stamp) {
		// Time behind the cell's counts as no time passing. A stamp a
		// whole window or more ahead of the clock is a wild time's and
		// comes back to `now` (the classifier's `touch_cell`, which reads
		// its clock here because its packet's time may be a stale one).
		// Here `now` is the clock's reading, per packet, so a stamp that
		// far ahead of it can only come from a replayed wild time, which
		// must not freeze the cell; the kernel's own clock never goes back.
		rate = decay_add(old, window, recip, inc);
		if (stamp - now >= window)
			cell->stamp = now;
	} else {
		// Idle for a window or more: the rate restarts at one event per
		// elapsed time (weir-limits' exact update).
		rate = add_sat(one_per_ns / elapsed, more);
		cell->stamp = now;
	}
	cell->rate = rate;
	return rate;
}

// weir-limits' `reduce`: the hash's high bits scaled onto `slots`.
static __always_inline __u64 reduce(const volatile struct weir_config *cfg, __u64 probe)
{
	if (cfg->slots_shift)
		return probe >> cfg->slots_shift;
	return mulhi(probe, cfg->slots);
}

// The lattice: `Generalisation::ALL` (hhh/src/lattice.rs), in its order.
// It is part of the algorithm, not of the configuration, so it is compiled
// in: once the loops below are unrolled, each generalisation's choice of
// address scope and ports folds away.
struct lattice_node {
	__u8 src;   // source digest: 0 exact prefix, 1 subnet, 2 any
	__u8 flags; // KEEP_SPORT | KEEP_DPORT | LAST_IN_LEVEL
	__u8 level;
};

#define SRC_EXACT 0
#define SRC_SUBNET 1
#define SRC_ANY 2
#define PORTS (KEEP_SPORT | KEEP_DPORT)

static const struct lattice_node LATTICE[GENERALISATIONS] = {
	{SRC_EXACT, PORTS | LAST_IN_LEVEL, 0},
	{SRC_SUBNET, PORTS, 1},
	{SRC_EXACT, KEEP_DPORT, 1},
	{SRC_EXACT, KEEP_SPORT | LAST_IN_LEVEL, 1},
	{SRC_ANY, PORTS, 2},
	{SRC_SUBNET, KEEP_DPORT, 2},
	{SRC_SUBNET, KEEP_SPORT, 2},
	{SRC_EXACT, LAST_IN_LEVEL, 2},
	{SRC_ANY, KEEP_DPORT, 3},
	{SRC_ANY, KEEP_SPORT, 3},
	{SRC_SUBNET, LAST_IN_LEVEL, 3},
	{SRC_ANY, LAST_IN_LEVEL, 4},
};

// The sketch's layout as the program sees it. A specialised program has
// every field a compile-time constant (see FILTER below); the general one
// reads them from the configuration.
struct layout {
	__u64 hashes;
	int blocked;
	int power_of_two; // reduce by `slots_shift` alone
};

// One generalisation of the packet: its hash, one event in each of its
// cells, and the count-min estimate (the smallest cell).
static __always_inline __u64 weir_generalisation(const volatile struct weir_config *cfg,
						    const struct layout layout,
						    const volatile __u64 (*keys)[2],
						    const struct tuple *t, const __u32 g,
						    __u64 now, __u64 events)
{
	const struct lattice_node node = LATTICE[g];
	const volatile struct weir_level *l = &cfg->levels[node.level];
	__u64 sport = (node.flags & KEEP_SPORT) ? t->sport : 0;
	__u64 dport = (node.flags & KEEP_DPORT) ? t->dport : 0;
	__u64 hash = mix(t->src[node.src] ^ keys[g][0],
			 (t->dst ^ (sport << 48) ^ (dport << 32)) ^ keys[g][1]);
	__u64 base = (__u64)g * cfg->cells_per_sketch;
	__u64 window = l->window, recip = l->recip, inc = l->inc, more = 0;
	if (events != 1) {
		more = mul_sat(inc, events - 1);
		inc = add_sat(inc, more);
	}
	__u64 rate = ~0ULL;
#pragma unroll
	for (__u32 i = 0; i < MAX_HASHES; i++) {
		if (i >= layout.hashes)
			break;
		__u64 probe = layout.blocked ? hash : hash * cfg->row_mult[i];
		__u64 slot = layout.power_of_two ? probe >> cfg->slots_shift : reduce(cfg, probe);
		__u32 index;
		if (layout.blocked) {
			// Distinct lanes start + i·step (mod 8) of one block (step odd).
			__u64 lane = ((hash & 7) + i * (((hash >> 3) & 3) * 2 + 1)) & 7;
			index = base + slot * 8 + lane;
		} else {
			index = base + i * cfg->slots + slot;
		}
		struct weir_cell *cell = bpf_map_lookup_elem(&weir_cells, &index);
		if (!cell)
			return 0;
		__u64 r = touch(window, recip, inc, cfg->one_per_ns, cell, now, more);
		if (r < rate)
			rate = r;
	}
	return rate;
}

static __always_inline int weir_filter(struct __sk_buff *skb, const struct layout layout)
{
	__u32 zero = 0;
	const volatile struct weir_config *cfg = &weir_cfg;
	const struct weir_state *st = bpf_map_lookup_elem(&weir_state, &zero);
	struct weir_stats *stats = bpf_map_lookup_elem(&weir_stats, &zero);
	if (!st || !stats)
		return skb->len;
	// Datagrams in this buffer: more than one only when coalesced (GRO).
	__u64 events = skb->gso_segs > 1 ? skb->gso_segs : 1;
	struct tuple t;
	if (parse(skb, cfg, &t, stats, events)) {
		stats->unparsed += events;
		return skb->len;
	}
	if (layout.hashes == 0 || layout.hashes > MAX_HASHES)
		return skb->len;
	const volatile __u64(*keys)[2] = t.v6 ? cfg->keys_v6 : cfg->keys_v4;
	__u64 now = (st->flags & FLAG_REPLAY_CLOCK) ? st->now : bpf_ktime_get_ns();
	__u64 limit = st->limit;
	__u64 max = 0;
#pragma unroll
	for (__u32 g = 0; g < GENERALISATIONS; g++) {
		const struct lattice_node node = LATTICE[g];
		__u64 rate = weir_generalisation(cfg, layout, keys, &t, g, now, events);
		if (rate > max)
			max = rate;
		if (!(node.flags & LAST_IN_LEVEL))
			continue;
		if (max > limit) {
			__u32 coin = (st->flags & FLAG_REPLAY_COIN) ? (__u32)st->coin
								      : bpf_get_prandom_u32();
			// coin / 2^32 < limit / rate, without a division: compare
			// the 128-bit products coin·rate and limit·2^32.
			// With hi = ⌊coin·max / 2^32⌋ that is simply hi < limit.
			__u64 lo = (__u64)coin * (max & 0xffffffffULL);
			__u64 hi = (__u64)coin * (max >> 32) + (lo >> 32);
			if (hi < limit) {
				stats->passed[node.level] += events;
				return skb->len;
			}
			stats->dropped[node.level] += events;
			return 0;
		}
		max = 0;
	}
	stats->unlimited += events;
	return skb->len;
}

// The general program: any supported layout, read from the configuration.
SEC("socket")
int weir_filter_any(struct __sk_buff *skb)
{
	const struct layout layout = {
		.hashes = weir_cfg.hashes,
		.blocked = weir_cfg.blocked != 0,
		.power_of_two = 0,
	};
	return weir_filter(skb, layout);
}

// Programs specialised for the common layouts (1–4 cells per key, rows or
// blocked, a power-of-two width; three cells per key never make a power of
// two of blocks): with the layout a constant, the cell loop
// unrolls to straight-line code and the per-cell branches go. The loader
// picks one by name (`weir_filter_rows_2`, …) when the configuration fits.
#define FILTER(name, h, b)                                                          \
	SEC("socket")                                                               \
	int name(struct __sk_buff *skb)                                             \
	{                                                                           \
		const struct layout layout = {.hashes = h, .blocked = b, .power_of_two = 1}; \
		return weir_filter(skb, layout);                                    \
	}

FILTER(weir_filter_rows_1, 1, 0)
FILTER(weir_filter_rows_2, 2, 0)
FILTER(weir_filter_rows_3, 3, 0)
FILTER(weir_filter_rows_4, 4, 0)
FILTER(weir_filter_blocked_1, 1, 1)
FILTER(weir_filter_blocked_2, 2, 1)
FILTER(weir_filter_blocked_4, 4, 1)

char LICENSE[] SEC("license") = "Dual MIT/GPL";
