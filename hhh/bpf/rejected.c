// SPDX-License-Identifier: MIT OR Apache-2.0
//
// A socket filter the verifier must refuse, for weir-hhh's test of the
// `KernelError::Verifier` path: it reads a map value without checking that
// the lookup found one (a hash map: unlike an array with a constant key,
// its lookups can miss). Only the crate's unit tests embed it.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rejected_map SEC(".maps");

SEC("socket")
int rejected(struct __sk_buff *skb)
{
	__u32 key = 0;
	__u32 *value = bpf_map_lookup_elem(&rejected_map, &key);
	return *value; // no NULL check: "invalid mem access 'map_value_or_null'"
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
