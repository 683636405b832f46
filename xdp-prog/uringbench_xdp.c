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
	if (eth->h_proto == be16(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
			goto pass;
		/* Fragments (offset or more-fragments set) go to the stack, which reassembles. */
		if (ip->frag_off & be16(0x3fff))
			goto pass;
		udp = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == be16(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		/* Extension headers are not followed: our senders never use them. */
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			goto pass;
		udp = (void *)(ip6 + 1);
	} else {
		goto pass;
	}
	if ((void *)(udp + 1) > end)
		goto pass;
	__u16 port = be16(udp->dest);
	if (port < cfg->port_lo || port > cfg->port_hi)
		goto pass;

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
