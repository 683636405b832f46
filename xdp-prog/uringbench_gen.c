// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * uringbench's live-frames generator: an XDP program that is never attached. User space runs
 * it with BPF_PROG_RUN in live-frames mode (BPF_F_TEST_XDP_LIVE_FRAMES): the kernel copies
 * one template frame into a pool of pages, runs this program on each, and transmits what it
 * returns XDP_TX for through the interface's ndo_xdp_xmit, with no skb
 * (engine/src/sys/xdp/live_frames.rs).
 *
 * Each run turns the template into the next datagram of one of its sending slot's flows, as
 * uringbench's other senders write them (engine/src/wire/udp_payload.rs): the flow's source
 * port, the 20-byte sequence header (64-bit sequence number, wall-clock send time, the
 * iperf2 HEADER_SEQNO64B flag) and the UDP checksum. The rest of the template (addresses,
 * lengths, the IPv4 header checksum, zero filler) is the same for every frame.
 *
 * The sending slot is the 4-byte metadata in front of the frame. One user-space thread
 * drives one slot with its own serial BPF_PROG_RUN calls, so a slot and its flows are
 * never written from two CPUs at once, wherever the thread runs: plain ARRAY maps, no atomics.
 *
 * The send time is read from the clock once per STAMP_FRAMES frames of a slot (the kernel's
 * transmit batch), not per frame: the clock read and its division into seconds and
 * microseconds were a tenth of a frame's cost, and a batch leaves within microseconds.
 *
 * Maps (names are read by the loader):
 *   gen_slots  ARRAY, key = slot: flows first_flow..first_flow+flows, round-robin cursor,
 *              FIN mode, address family, wall-clock offset of the monotonic clock, the
 *              current send time and the frames left to stamp with it.
 *   gen_flows  ARRAY, key = flow: next sequence number, source port, checksum base.
 */
#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define be16(x) __builtin_bswap16(x)
#define be32(x) __builtin_bswap32(x)
#else
#define be16(x) (x)
#define be32(x) (x)
#endif

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;

/* Limits the loader checks against (engine/src/sys/xdp/live_frames.rs MAX_SLOTS, MAX_FLOWS). */
#define MAX_SLOTS 256
#define MAX_FLOWS 4096

/* Frames stamped with one clock read (engine/src/workload/xdp_live.rs BATCH). */
#define STAMP_FRAMES 64

/* iperf2 HEADER_SEQNO64B: the sequence number is id (low 32 bits) and id2 (high 32 bits). */
#define FLAGS_WORD 0x08000000

struct gen_slot {
	__u64 clock_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC, nanoseconds */
	__u32 first_flow;
	__u32 flows;        /* 0: drop every frame (the loader's probe) */
	__u32 cursor;       /* the next flow, relative to first_flow */
	__u32 fin;          /* 1: write each flow's FIN (its negated next sequence number) */
	__u32 ipv6;
	__u32 stamp_left;   /* frames still to carry stamp_sec/stamp_usec; 0: read the clock */
	__u32 stamp_sec;
	__u32 stamp_usec;
};

struct gen_flow {
	__u64 next_seq;
	__u64 base_sum;     /* ones'-complement sum of the pseudo-header, UDP header, zero payload */
	__u32 src_port;     /* host order */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct gen_slot);
} gen_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_FLOWS);
	__type(key, __u32);
	__type(value, struct gen_flow);
} gen_flows SEC(".maps");

/*
 * Writes the datagram at header length `hdr` (42: IPv4, 62: IPv6). A 32-bit word sums to the
 * same folded ones'-complement value as its two 16-bit halves, so the five header words are
 * added whole.
 */
static __always_inline int emit(void *data, void *end, __u32 hdr, struct gen_slot *slot, struct gen_flow *flow)
{
	__u8 *p = data;
	__u32 *seqhdr = (void *)(p + hdr);

	if ((void *)(seqhdr + 5) > end)
		return XDP_ABORTED;
	__u64 seq = flow->next_seq;
	__u64 id = slot->fin ? (__u64)(-(__s64)seq) : seq;
	if (!slot->fin)
		flow->next_seq = seq + 1;
	if (slot->stamp_left == 0) {
		__u64 ns = bpf_ktime_get_ns() + slot->clock_offset;
		slot->stamp_sec = ns / 1000000000ULL;
		slot->stamp_usec = (ns % 1000000000ULL) / 1000;
		slot->stamp_left = STAMP_FRAMES;
	}
	slot->stamp_left--;
	__u32 w[5] = { (__u32)id, slot->stamp_sec, slot->stamp_usec, (__u32)(id >> 32), FLAGS_WORD };
	__u64 sum = flow->base_sum + w[0] + w[1] + w[2] + w[3] + w[4];

	seqhdr[0] = be32(w[0]);
	seqhdr[1] = be32(w[1]);
	seqhdr[2] = be32(w[2]);
	seqhdr[3] = be32(w[3]);
	seqhdr[4] = be32(w[4]);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	__u16 csum = ~(__u16)sum;
	if (csum == 0)
		csum = 0xffff; /* a computed zero is sent as all ones (zero means "no checksum") */
	/* UDP source port and checksum: offsets 0 and 6 of the UDP header, just before the payload. */
	*(__u16 *)(p + hdr - 8) = be16((__u16)flow->src_port);
	*(__u16 *)(p + hdr - 2) = be16(csum);
	return XDP_TX;
}

SEC("xdp")
int uringbench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 *meta = (void *)(long)ctx->data_meta;

	if ((void *)(meta + 1) > data)
		return XDP_ABORTED;
	__u32 key = *meta;
	struct gen_slot *slot = bpf_map_lookup_elem(&gen_slots, &key);
	if (!slot || slot->flows == 0)
		return XDP_DROP;
	__u32 index = slot->first_flow + slot->cursor;
	slot->cursor = slot->cursor + 1 >= slot->flows ? 0 : slot->cursor + 1;
	struct gen_flow *flow = bpf_map_lookup_elem(&gen_flows, &index);
	if (!flow)
		return XDP_ABORTED;
	if (slot->ipv6)
		return emit(data, end, 62, slot, flow);
	return emit(data, end, 42, slot, flow);
}

char _license[] SEC("license") = "Dual MIT/GPL";
