// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * uringbench's XDP program: steers the test's UDP datagrams to the AF_XDP socket of the
 * receive queue they arrived on, and passes everything else (ARP, ICMP, the TCP control
 * channel, other UDP) to the kernel, so the host stays reachable during a test.
 *
 * Built by engine/build.rs with `clang -O2 -g -target bpf` and embedded in the engine, which
 * loads it with libbpf (engine/src/sys/xdp/program.rs). No libbpf headers are needed: the few
 * macros and helpers used are declared below, so the build depends only on clang and the
 * kernel's UAPI headers (linux-libc-dev).
 *
 * Maps (names are read by the loader):
 *   xsks      XSKMAP, key = rx queue index, value = AF_XDP socket fd (set by user space).
 *   steer     ARRAY[1] of struct steer_config: the UDP destination port range of the test.
 *   counters  PERCPU_ARRAY, key = rx queue index: frames redirected, passed, dropped.
 *
 * Test frames that arrive on a queue with no socket in `xsks` are dropped and counted as
 * dropped: passing them would make the kernel answer each with an ICMP port unreachable.
 *
 * Counting in the kernel (`recv --engine xdp --xdp-count kernel`, steer_config.kernel_count):
 * test frames are not redirected but accounted here and dropped, with the receiver's sequence
 * rules (engine/src/metrics/seq.rs) in each flow's entry of `kflows`:
 *   kflow_of  ARRAY, key = UDP source port (host order): 1 + the flow's index in kflows,
 *             0 for a port that is no flow of the test (an array: no hashing per frame).
 *   kflows    PERCPU_ARRAY, key = flow index: its tracker, one per CPU, so no lock is taken
 *             per frame. A queue's frames are polled on one CPU at a time and in ring order,
 *             so each CPU's tracker sees its share of a flow in order; user space merges the
 *             CPUs' trackers when it reads them (engine/src/sys/xdp/kernel_count.rs).
 * The duplicate window is 1024 words of 64 sequence numbers, each tagged with the word of
 * sequence numbers it holds, so advancing never clears a span: a word holding an older tag
 * reads as empty.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define be16(x) __builtin_bswap16(x)
#else
#define be16(x) (x)
#endif

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

/* Queues a program can serve; the loader refuses more (engine/src/sys/xdp/program.rs MAX_QUEUES). */
#define MAX_QUEUES 256

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* Host byte order; a frame is test traffic when port_lo <= UDP dest port <= port_hi. */
struct steer_config {
	__u16 port_lo;
	__u16 port_hi;
	__u32 kernel_count; /* 1: account test frames here and drop them (no socket) */
	__u64 clock_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns: arrival times */
	__u32 peer[4];      /* the sender's address (IPv4 in peer[0]), network order */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_config);
} steer SEC(".maps");

struct queue_counters {
	__u64 redirected; /* test frames handed to the queue's AF_XDP socket */
	__u64 passed;     /* everything else, given to the kernel's stack */
	__u64 dropped;    /* test frames with no socket on their queue */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct queue_counters);
} counters SEC(".maps");

#define KWIN_WORDS 1024 /* 65536 sequence numbers, as the user-space tracker */

struct kwin_word {
	__u64 tag;  /* seq >> 6 of the sequence numbers this word holds */
	__u64 bits;
};

/* One flow's accounting; the loader reads it as engine/src/sys/xdp/kernel_count.rs KFlow. */
struct kflow {
	__u64 received;
	__u64 bytes;
	__u64 highest;
	__u64 out_of_order;
	__u64 duplicates;
	__u64 too_old;
	__u64 fin_seq;      /* lowest FIN sequence number seen, 0: none */
	__u64 strangers;    /* test-port frames from this port but another address */
	__u64 foreign;      /* too short for the sequence header, or id 0 */
	__s64 jitter16_us;  /* RFC 3550 jitter, microseconds times 16 */
	__s64 last_transit_us;
	__u64 transits;     /* datagrams with a send time */
	__u64 last_stamp;   /* the last send time seen (seconds << 32 | microseconds) */
	__u64 arrival_us;   /* the clock when that send time first arrived */
	struct kwin_word win[KWIN_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* the loader makes it 65536 (every port) when counting */
	__type(key, __u32);
	__type(value, __u32);
} kflow_of SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); /* sized by the loader to the test's flows */
	__type(key, __u32);
	__type(value, struct kflow);
} kflows SEC(".maps");

static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define be32(x) __builtin_bswap32(x)
#else
#define be32(x) (x)
#endif

/* iperf2 HEADER_SEQNO64B (engine/src/wire/udp_payload.rs). */
#define FLAG_SEQNO64B 0x08000000

/*
 * Accounts one test datagram (UDP header at `udp`) to its flow, as SeqTracker::record and
 * record_fin do; `from_peer`: the source address is the test's sender.
 */
static __always_inline void kernel_count(struct udphdr *udp, void *end, struct steer_config *cfg, int from_peer)
{
	__u32 port = be16(udp->source);
	__u32 *slot = bpf_map_lookup_elem(&kflow_of, &port);
	if (!slot || *slot == 0)
		return; /* not a flow of the test: counted by the caller's queue counters only */
	__u32 index = *slot - 1;
	struct kflow *f = bpf_map_lookup_elem(&kflows, &index);
	if (!f)
		return;
	__u32 *hdr = (void *)(udp + 1);
	if (!from_peer) {
		f->strangers++;
		return;
	}
	if ((void *)(hdr + 5) > end) {
		f->foreign++;
		return;
	}
	__u32 id = be32(hdr[0]), sec = be32(hdr[1]), usec = be32(hdr[2]), id2 = be32(hdr[3]);
	__s64 value = (be32(hdr[4]) & FLAG_SEQNO64B) ? (__s64)(((__u64)id2 << 32) | id) : (__s64)(__s32)id;
	__u64 len = be16(udp->len) - sizeof(*udp);
	int timed = !((sec == 0 && usec == 0) || usec >= 1000000);

	if (value == 0) {
		f->foreign++;
	} else if (value < 0) {
		__u64 fin = -value;
		if (f->fin_seq == 0 || fin < f->fin_seq)
			f->fin_seq = fin;
	} else {
		__u64 seq = value;
		__u64 tag = seq >> 6;
		struct kwin_word *w = &f->win[tag & (KWIN_WORDS - 1)];
		__u64 mask = 1ULL << (seq & 63);
		int counted = 1;
		if (seq > f->highest) {
			f->highest = seq;
		} else if (f->highest - seq >= KWIN_WORDS * 64) {
			f->too_old++;
			f->out_of_order++;
			w = 0;
		} else if (w->tag == tag && (w->bits & mask)) {
			f->duplicates++;
			counted = 0;
		} else {
			f->out_of_order++;
		}
		if (counted) {
			if (w) {
				if (w->tag != tag) {
					w->tag = tag;
					w->bits = 0;
				}
				w->bits |= mask;
			}
			f->received++;
			f->bytes += len;
			if (timed) {
				/* The clock is read when the send time changes: a sender that stamps a
				 * batch of frames with one time has the batch's arrival taken once. */
				__u64 stamp = ((__u64)sec << 32) | usec;
				if (stamp != f->last_stamp) {
					f->last_stamp = stamp;
					f->arrival_us = (bpf_ktime_get_ns() + cfg->clock_offset) / 1000;
				}
				__s64 transit = (__s64)f->arrival_us - ((__s64)sec * 1000000 + usec);
				if (f->transits) {
					__s64 d = transit - f->last_transit_us;
					if (d < 0)
						d = -d;
					f->jitter16_us += d - ((f->jitter16_us + 8) >> 4);
				}
				f->last_transit_us = transit;
				f->transits++;
			}
		}
	}
}

SEC("xdp")
int uringbench_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 queue = ctx->rx_queue_index;
	__u32 zero = 0;
	struct queue_counters *count = bpf_map_lookup_elem(&counters, &queue);
	struct steer_config *cfg = bpf_map_lookup_elem(&steer, &zero);
	struct ethhdr *eth = data;
	struct udphdr *udp;

	if (!cfg || (void *)(eth + 1) > end)
		goto pass;
	int from_peer;
	if (eth->h_proto == be16(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
			goto pass;
		/* Fragments (offset or more-fragments set) go to the stack, which reassembles. */
		if (ip->frag_off & be16(0x3fff))
			goto pass;
		udp = (void *)ip + ip->ihl * 4;
		from_peer = ip->saddr == cfg->peer[0];
	} else if (eth->h_proto == be16(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		/* Extension headers are not followed: our senders never use them. */
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			goto pass;
		udp = (void *)(ip6 + 1);
		from_peer = ip6->saddr.in6_u.u6_addr32[0] == cfg->peer[0] && ip6->saddr.in6_u.u6_addr32[1] == cfg->peer[1] &&
			    ip6->saddr.in6_u.u6_addr32[2] == cfg->peer[2] && ip6->saddr.in6_u.u6_addr32[3] == cfg->peer[3];
	} else {
		goto pass;
	}
	if ((void *)(udp + 1) > end)
		goto pass;
	__u16 port = be16(udp->dest);
	if (port < cfg->port_lo || port > cfg->port_hi)
		goto pass;

	if (cfg->kernel_count) {
		kernel_count(udp, end, cfg, from_peer);
		if (count)
			count->redirected++;
		return XDP_DROP;
	}
	/* The low bits of flags are the action when the queue has no socket. */
	long action = bpf_redirect_map(&xsks, queue, XDP_DROP);
	if (count) {
		if (action == XDP_REDIRECT)
			count->redirected++;
		else
			count->dropped++;
	}
	return action;
pass:
	if (count)
		count->passed++;
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
