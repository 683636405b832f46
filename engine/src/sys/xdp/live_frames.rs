//! The live-frames generator (`xdp-prog/uringbench_gen.c`): loading it, describing its flows
//! and running it with `BPF_PROG_RUN` in live-frames mode.
//!
//! `bpf(BPF_PROG_TEST_RUN)` with `BPF_F_TEST_XDP_LIVE_FRAMES` (Linux 5.18) copies the template
//! frame into a pool of pages once, runs the program `repeat` times on them, `batch_size` at a
//! time, and sends every frame it returns `XDP_TX` for out of the ingress interface through
//! the driver's `ndo_xdp_xmit`: no socket, no skb, no copy from user space per frame. The
//! program is never attached to anything, so nothing is left behind when the object closes.
//!
//! Two things can make it impossible, and both are found before traffic starts: a kernel
//! without the flag refuses the first run with `EINVAL` ([`LiveFrames::load`] runs a one-frame
//! probe that the program drops), and a driver without `ndo_xdp_xmit` (or a veth whose peer
//! can take no XDP frames) drops every frame silently, which the interface's XDP features
//! (netdev netlink, Linux 6.3) show ([`ndo_xmit`]).

use crate::base::error::{Error, Result};
use crate::sys::netlink::{self, attrs, data_messages, find, genl_family, genl_request, push_attr, u64_at, Socket};
use crate::sys::xdp::bpf_object::{errno_of, map_lookup, map_update, realtime_offset_ns, LoadedObject};
use libxdp_sys as sys;

/// The compiled program (see `engine/build.rs`).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/uringbench_gen.o"));

/// Sending slots and flows the program's maps hold (`MAX_SLOTS`, `MAX_FLOWS` in the C source).
pub(crate) const MAX_SLOTS: u32 = 256;
pub(crate) const MAX_FLOWS: u32 = 4096;

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (uapi/linux/bpf.h).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Bytes of metadata in front of each frame: the sending slot (a native-endian u32).
const META_LEN: usize = 4;
/// The slot the load probe runs with: left unconfigured, so the program drops the frame.
const PROBE_SLOT: u32 = MAX_SLOTS - 1;

/// `struct gen_slot` of the C source.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct GenSlot {
    clock_offset: u64,
    first_flow: u32,
    flows: u32,
    cursor: u32,
    fin: u32,
    ipv6: u32,
    stamp_left: u32,
    stamp_sec: u32,
    stamp_usec: u32,
}

/// `struct gen_flow` of the C source.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct GenFlow {
    next_seq: u64,
    base_sum: u64,
    src_port: u32,
    pad: u32,
}

/// `struct xdp_md` (uapi/linux/bpf.h), the context a test run starts from.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// One flow as the generator writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveFlow {
    pub src_port: u16,
    /// The sequence number of the flow's first datagram.
    pub first_seq: u64,
    /// Ones'-complement sum of the pseudo-header, the UDP header and the zero filler
    /// ([`crate::wire::frame::FrameTemplate::checksum_base`]).
    pub checksum_base: u64,
}

/// What one sending slot runs: its template frame behind the slot's metadata, and the context
/// that names the interface. Built once per slot; each run only passes pointers to it.
pub(crate) struct SlotInput {
    data: Vec<u8>,
    ctx: XdpMd,
}

/// The loaded generator: one per sending side, shared by its threads (each drives its slots).
pub(crate) struct LiveFrames {
    object: LoadedObject,
    slots_fd: i32,
    flows_fd: i32,
    ifindex: u32,
}

impl LiveFrames {
    /// Loads the program for frames sent out of `ifindex` and runs the one-frame probe: an
    /// error that says so when the kernel has no live-frames mode.
    pub(crate) fn load(ifindex: u32) -> Result<Self> {
        let object = LoadedObject::load(OBJECT, "uringbench_gen", &[])?;
        let slots_fd = object.map_fd("gen_slots")?;
        let flows_fd = object.map_fd("gen_flows")?;
        let gen = Self { object, slots_fd, flows_fd, ifindex };
        let probe = gen.slot_input(PROBE_SLOT, &[0u8; 60]);
        gen.run(&probe, 1, 1).map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => Error::unsupported(format!(
                "this kernel cannot run XDP programs on live frames (BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES needs Linux 5.18 or later: {e}): use --gen xsk"
            )),
            Some(libc::EPERM) | Some(libc::EACCES) => Error::unsupported(format!(
                "running the XDP generator was refused ({e}): run as root (or with CAP_BPF and CAP_NET_ADMIN)"
            )),
            _ => Error::unsupported(format!("the live-frames probe run of the XDP generator failed: {e}")),
        })?;
        Ok(gen)
    }

    /// Describes slot `slot`: its flows are `first_flow..first_flow + flows.len()`, numbered
    /// from the first sequence number again.
    pub(crate) fn configure_slot(&self, slot: u32, first_flow: u32, flows: &[LiveFlow], ipv6: bool) -> Result<()> {
        let end = first_flow as usize + flows.len();
        if slot >= MAX_SLOTS || end > MAX_FLOWS as usize {
            return Err(Error::usage(format!(
                "the XDP generator serves {MAX_SLOTS} queues and {MAX_FLOWS} flows at most (asked: queue {slot}, {end} flows)"
            )));
        }
        for (i, f) in (first_flow..).zip(flows) {
            let flow =
                GenFlow { next_seq: f.first_seq, base_sum: f.checksum_base, src_port: u32::from(f.src_port), pad: 0 };
            map_update(self.flows_fd, &i, &flow, "describing a flow to the XDP generator")?;
        }
        let value = GenSlot {
            clock_offset: realtime_offset_ns(),
            first_flow,
            flows: flows.len() as u32,
            ipv6: u32::from(ipv6),
            ..GenSlot::default()
        };
        map_update(self.slots_fd, &slot, &value, "describing a queue to the XDP generator")
    }

    /// Switches slot `slot` to writing FINs: each frame then carries its flow's negated next
    /// sequence number and the numbers stop advancing.
    pub(crate) fn finish_slot(&self, slot: u32) -> Result<()> {
        let mut value: GenSlot = map_lookup(self.slots_fd, &slot, "reading the XDP generator's queue")?;
        value.fin = 1;
        map_update(self.slots_fd, &slot, &value, "switching the XDP generator to FINs")
    }

    /// The next (never sent) sequence number of flow `flow`.
    pub(crate) fn next_seq(&self, flow: u32) -> Result<u64> {
        let value: GenFlow = map_lookup(self.flows_fd, &flow, "reading the XDP generator's flow")?;
        Ok(value.next_seq)
    }

    /// The input of slot `slot`'s runs: `frame` (a whole Ethernet frame of the slot's first
    /// flow) behind the slot number.
    pub(crate) fn slot_input(&self, slot: u32, frame: &[u8]) -> SlotInput {
        let mut data = Vec::with_capacity(META_LEN + frame.len());
        data.extend_from_slice(&slot.to_ne_bytes());
        data.extend_from_slice(frame);
        let ctx = XdpMd {
            data: META_LEN as u32,
            data_end: data.len() as u32,
            ingress_ifindex: self.ifindex,
            ..XdpMd::default()
        };
        SlotInput { data, ctx }
    }

    /// Runs the program on `repeat` live frames of `input`, `batch` per transmit flush.
    pub(crate) fn run(&self, input: &SlotInput, repeat: u32, batch: u32) -> std::io::Result<()> {
        // SAFETY: all-zero is a valid bpf_test_run_opts; libbpf reads `sz` to know which
        // fields the caller knows.
        let mut opts: sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<sys::bpf_test_run_opts>();
        opts.data_in = input.data.as_ptr().cast();
        opts.data_size_in = input.data.len() as u32;
        opts.ctx_in = (&input.ctx as *const XdpMd).cast();
        opts.ctx_size_in = std::mem::size_of::<XdpMd>() as u32;
        opts.repeat = repeat as i32;
        opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
        opts.batch_size = batch;
        // SAFETY: the program descriptor is live for `self`, and the buffers the options point
        // to live across the call (the kernel copies them in; live mode writes nothing back).
        let rc = unsafe { sys::bpf_prog_test_run_opts(self.object.prog_fd, &mut opts) };
        if rc != 0 {
            return Err(errno_of(rc));
        }
        Ok(())
    }
}

// <linux/netdev.h>
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_FAMILY_VERSION: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_XDP_ACT_NDO_XMIT: u64 = 1 << 2;

/// Whether interface `ifindex` takes frames through `ndo_xdp_xmit` now; `None` when the kernel
/// cannot say (no netdev netlink family, before Linux 6.3). A veth offers it only while its
/// peer can receive XDP frames: the peer has an XDP program, or GRO on.
pub(crate) fn ndo_xmit(ifindex: u32) -> Result<Option<bool>> {
    let mut sock = Socket::open_protocol(libc::NETLINK_GENERIC)?;
    let Ok(family) = genl_family(&mut sock, "netdev") else {
        return Ok(None);
    };
    let what = "reading the interface's XDP features (netdev dev-get)";
    let mut a = Vec::new();
    push_attr(&mut a, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes());
    let reply = sock.request(family, 0, &genl_request(NETDEV_CMD_DEV_GET, NETDEV_FAMILY_VERSION, &a), what)?;
    parse_ndo_xmit(&reply, what).map(Some)
}

/// The `NDO_XMIT` bit out of a netdev dev-get reply.
fn parse_ndo_xmit(reply: &[u8], what: &str) -> Result<bool> {
    let msgs = data_messages(reply, what)?;
    let msg = msgs.first().ok_or_else(|| netlink::malformed(what, "no reply message"))?;
    let body = msg.payload.get(netlink::GENL_HDRLEN..).ok_or_else(|| netlink::malformed(what, "short genl header"))?;
    let a = attrs(body, what)?;
    let features = find(&a, NETDEV_A_DEV_XDP_FEATURES)
        .and_then(|v| u64_at(v, 0))
        .ok_or_else(|| netlink::malformed(what, "no xdp-features attribute"))?;
    Ok(features & NETDEV_XDP_ACT_NDO_XMIT != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_match_the_c_layout() {
        assert_eq!(std::mem::size_of::<GenSlot>(), 40);
        assert_eq!(std::mem::size_of::<GenFlow>(), 24);
        assert_eq!(std::mem::size_of::<XdpMd>(), 24);
    }

    #[test]
    fn ndo_xmit_bit_is_read_from_the_features() {
        use crate::sys::netlink::genl_message as message;
        let with = message(1, 1, &[(NETDEV_A_DEV_XDP_FEATURES, (0x7u64).to_ne_bytes().to_vec())]);
        assert!(parse_ndo_xmit(&with, "t").unwrap());
        let without = message(1, 1, &[(NETDEV_A_DEV_XDP_FEATURES, (0x3u64).to_ne_bytes().to_vec())]);
        assert!(!parse_ndo_xmit(&without, "t").unwrap());
        let none = message(1, 1, &[(NETDEV_A_DEV_IFINDEX, 5u32.to_ne_bytes().to_vec())]);
        assert!(parse_ndo_xmit(&none, "t").is_err());
    }
}
