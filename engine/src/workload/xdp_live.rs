//! `send --engine xdp --gen live`: the AF_XDP engine's sending half with the live-frames
//! generator instead of sockets. The hello, the ports, the frame templates and the report are
//! those of the socket sender ([`crate::workload::xdp_stream`]); only the frames' maker differs.
//!
//! A queue is a sending slot of the generator, driven by the thread that serves the queue.
//! Frames leave through the interface's `ndo_xdp_xmit`, which a veth offers only while its
//! peer can take XDP frames: `recv --engine xdp` attaches a program there, and for a socket
//! receiver GRO on the peer does it (`ethtool -K PEER gro on`). The check runs after the hello,
//! when the receiver's program is in place; where the kernel cannot tell (before Linux 6.3)
//! the report says so and a receiver that gets nothing shows every frame lost.

use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::base::text::first_seen;
use crate::metrics::figures::{Role, SideReport};
use crate::metrics::xdp::XdpFigures;
use crate::runtime::placement::Placement;
use crate::runtime::side::halves::{Indexed, StreamHalves};
use crate::runtime::side::{Live, SideEnd, SideProbes, TestSide};
use crate::sys::xdp::live_frames::{self, LiveFlow, LiveFrames};
use crate::transport::xdp::live_gen::{self, LiveGenConfig, LiveSlot};
use crate::transport::xdp::send::{XdpFlowSent, XdpSendFlow};
use crate::uring::ring::WaitMode;
use crate::wire::udp_payload::{WireTime, FIRST_SEQ};
use crate::workload::xdp_sender::{flows_by_queue, sender_report};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames per transmit flush in a `BPF_PROG_RUN` call (the kernel's default batch).
const BATCH: u32 = 64;

/// Loads the generator for frames out of `ifindex`: refuses here when the kernel has no
/// live-frames mode.
pub(crate) fn prepare(ifindex: u32) -> Result<Arc<LiveFrames>> {
    Ok(Arc::new(LiveFrames::load(ifindex)?))
}

/// Where the generator's frames go out.
pub(crate) struct LiveOutput {
    pub ifname: String,
    pub ifindex: u32,
    /// Ethernet frame length of a data datagram.
    pub frame_len: u32,
    pub ipv6: bool,
}

/// The live-frames sending half.
pub(crate) struct LiveSendHalf<'a> {
    spec: &'a TestSpec,
    placement: &'a Placement,
    gen: Arc<LiveFrames>,
    at: LiveOutput,
    /// What the `ndo_xdp_xmit` check could not settle.
    note: Option<String>,
}

impl LiveOutput {
    /// Checks that the interface takes XDP frames now (after the hello: the receiver's
    /// program may be what makes a veth take them); what the check could not settle.
    pub(crate) fn check_xmit(&self) -> Result<Option<String>> {
        let at = self;
        Ok(match live_frames::ndo_xmit(at.ifindex)? {
            Some(true) => None,
            Some(false) => {
                return Err(Error::unsupported(format!(
                    "{} does not take XDP frames (no ndo_xdp_xmit, or for a veth: its peer has neither an XDP program nor GRO on): receive with `recv --engine xdp`, turn GRO on at the peer (ethtool -K PEER gro on, in its namespace), or use --gen xsk",
                    at.ifname
                )))
            }
            None => Some(format!(
                "this kernel cannot say whether {} takes XDP frames (no netdev netlink family): frames it cannot send are dropped unseen",
                at.ifname
            )),
        })
    }
}

impl<'a> LiveSendHalf<'a> {
    /// The half over `at`, whose [`LiveOutput::check_xmit`] left `note`.
    pub(crate) fn new(
        spec: &'a TestSpec,
        placement: &'a Placement,
        gen: Arc<LiveFrames>,
        at: LiveOutput,
        note: Option<String>,
    ) -> Self {
        Self { spec, placement, gen, at, note }
    }

    /// Describes each queue's flows to the generator: one slot per queue that has flows.
    fn slots(&self, flows: Vec<Indexed<XdpSendFlow>>) -> Result<Vec<(u32, LiveSlot)>> {
        let mut first_flow = 0;
        let mut items = Vec::new();
        for (queue, flows) in (0..).zip(flows_by_queue(self.spec, flows)) {
            let Some(first) = flows.first() else { continue };
            let described: Vec<LiveFlow> = flows
                .iter()
                .map(|f| LiveFlow {
                    src_port: f.template.src_port(),
                    first_seq: FIRST_SEQ,
                    checksum_base: f.template.checksum_base(),
                })
                .collect();
            self.gen.configure_slot(queue, first_flow, &described, self.at.ipv6)?;
            // The template frame: the first flow's, numbered and stamped; the program rewrites
            // the port, the sequence header and the checksum of every frame.
            let mut frame = vec![0u8; first.template.frame_len()];
            first.template.write(&mut frame, FIRST_SEQ, WireTime::now(), false);
            let input = self.gen.slot_input(queue, &frame);
            let n = flows.len() as u32;
            items.push((queue, LiveSlot { slot: queue, queue, first_flow, flows: n, input }));
            first_flow += n;
        }
        Ok(items)
    }
}

impl StreamHalves for LiveSendHalf<'_> {
    type Flow = XdpSendFlow;
    fn send(&self, flows: Vec<Indexed<XdpSendFlow>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        let (spec, placement) = (self.spec, self.placement);
        let items = self.slots(flows)?;
        let nic_queues: Vec<u32> = items.iter().map(|(q, _)| *q).collect();
        let total_flows = u64::from(spec.flows().max(1));
        let side = TestSide::new(Role::Sender, spec, placement, live);
        let input = |(_, slots): (u32, Vec<LiveSlot>)| {
            let flows: u64 = slots.iter().map(|s| u64::from(s.flows)).sum();
            let cfg = LiveGenConfig {
                len: spec.len,
                deadline: t0 + spec.total(),
                halt: Some(side.halt()),
                rate_bps: spec.rate_bps * flows / total_flows,
                burst: spec.burst.unwrap_or(0),
                batch: BATCH,
                fin_copies: 5,
                fin_interval: Duration::from_millis(5),
                spin: placement.wait == WaitMode::Spin,
            };
            (slots, cfg)
        };
        let gen = Arc::clone(&self.gen);
        let threads =
            side.spawn(items, input, move |(slots, cfg), counters| Ok(live_gen::run(&gen, slots, counters, &cfg)))?;
        let probes = SideProbes { iface: Some(&self.at.ifname), ..SideProbes::default() };
        let run = side.run(threads, t0, probes, SideEnd::AtDeadline)?;
        let results = &run.results;
        let frames: u64 = results.iter().map(|r| r.frames).sum();
        let mut notes = vec![format!(
            "live frames: BPF_PROG_RUN of the generator program, batch {BATCH}, out through ndo_xdp_xmit of {}",
            self.at.ifname
        )];
        notes.extend(self.note.clone());
        notes.extend(first_seen(results.iter().flat_map(|r| r.notes.iter().cloned())));
        let figures = XdpFigures {
            interface: self.at.ifname.clone(),
            nic_queues,
            frame_len: self.at.frame_len,
            frames,
            produced: frames,
            wakeups: results.iter().map(|r| r.calls).sum(),
            notes,
            ..XdpFigures::default()
        };
        let flows: Vec<&XdpFlowSent> = results.iter().flat_map(|r| r.flows.iter()).collect();
        Ok(sender_report(&side, &run, &flows, figures, spec.len))
    }
}
