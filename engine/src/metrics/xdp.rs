//! The AF_XDP engine (`--engine xdp`): a UDP packet generator and sink on AF_XDP sockets bound
//! to NIC queues, bypassing the socket layer, for packet-rate and small-packet tests.
//!
//! - [`program`]: uringbench's own XDP program (`xdp-prog/`), which steers only the test's UDP
//!   port to the sockets and passes everything else (ARP, ICMP, the TCP control channel), so the
//!   host stays reachable during a test; attached through a BPF link, so it is detached however
//!   the process ends.
//! - [`socket`]: one AF_XDP socket and UMEM per queue (zero-copy where the driver can, else copy;
//!   need_wakeup always).
//! - [`frame`]: Ethernet/IPv4/IPv6/UDP frames with checksums, carrying the UDP engine's
//!   sequence/timestamp header ([`crate::wire::udp_payload`]), so any uringbench receiver accounts them.
//! - [`send`], [`recv`]: the queue threads; [`stream`]: the test over the control channel, both
//!   ends (`send --engine xdp`, `recv --engine xdp`), mixable with the socket engine.

pub use crate::sys::xdp::program::{AttachMode, SteerCounters};
pub use crate::sys::xdp::socket::{BindMode, SocketCounters};

use serde::{Deserialize, Serialize};

/// What the AF_XDP engine did on one side, for the report (`xdp` in JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XdpFigures {
    pub interface: String,
    /// NIC queues with a socket bound.
    pub nic_queues: Vec<u32>,
    /// Receiver: how the program runs (native or generic). Senders attach no program.
    pub program_mode: Option<AttachMode>,
    /// How the sockets were bound (copy or zero-copy).
    pub bind: Option<BindMode>,
    /// Whether `XDP_USE_NEED_WAKEUP` was in effect (always asked for).
    pub need_wakeup: bool,
    /// Ethernet frame length of a data datagram (without FCS).
    pub frame_len: u32,
    /// Sender: frames the kernel completed (data and FINs). Receiver: frames read off the RX rings.
    pub frames: u64,
    /// Sender: frames produced to the TX rings.
    #[serde(default)]
    pub produced: u64,
    /// Sender: `sendto` kicks; receiver: idle polls.
    pub wakeups: u64,
    /// Sender: times the TX ring or UMEM was full and the thread waited.
    #[serde(default)]
    pub ring_full: u64,
    /// Receiver: the XDP program's counters summed over queues.
    pub steer: Option<SteerCounters>,
    /// The sockets' kernel counters (`XDP_STATISTICS`), summed.
    pub sockets: SocketCounters,
    /// Receiver: valid test-port datagrams from an unknown address or port.
    #[serde(default)]
    pub strangers: u64,
    /// Receiver: frames that failed the checks (truncated, bad checksum, not UDP to the port).
    #[serde(default)]
    pub malformed: u64,
    /// Receiver: datagrams too short for the sequence header.
    #[serde(default)]
    pub foreign: u64,
    /// Receiver: datagrams whose UDP checksum was left by the sending host to a NIC offload
    /// that a virtual link never ran (kernel senders over veth); counted, not verifiable.
    #[serde(default)]
    pub checksum_unverified: u64,
    /// Fallbacks and anything else not as asked.
    pub notes: Vec<String>,
}

impl XdpFigures {
    /// One line for the text report.
    pub fn describe(&self) -> String {
        let mode = match self.program_mode {
            Some(AttachMode::Native) => "program native, ",
            Some(AttachMode::Generic) => "program generic, ",
            None => "",
        };
        let bind = match self.bind {
            Some(BindMode::ZeroCopy) => "zero-copy",
            Some(BindMode::Copy) => "copy mode",
            None => "no socket",
        };
        let mut s = format!(
            "AF_XDP on {} queue{} {:?}: {mode}{bind}{}, {} B frames, {} frames",
            self.interface,
            if self.nic_queues.len() == 1 { "" } else { "s" },
            self.nic_queues,
            if self.need_wakeup { ", need_wakeup" } else { "" },
            self.frame_len,
            self.frames
        );
        if let Some(c) = &self.steer {
            s += &format!("; program redirected {} passed {} dropped {}", c.redirected, c.passed, c.dropped);
        }
        let k = &self.sockets;
        let drops = k.rx_dropped + k.rx_ring_full + k.rx_invalid_descs + k.tx_invalid_descs;
        if drops > 0 || k.rx_fill_ring_empty > 0 {
            s += &format!(
                "; socket rx_dropped {} rx_ring_full {} fill_ring_empty {} invalid {}",
                k.rx_dropped,
                k.rx_ring_full,
                k.rx_fill_ring_empty,
                k.rx_invalid_descs + k.tx_invalid_descs
            );
        }
        if self.strangers + self.malformed + self.foreign > 0 {
            s += &format!("; strangers {} malformed {} foreign {}", self.strangers, self.malformed, self.foreign);
        }
        if self.checksum_unverified > 0 {
            s += &format!("; {} UDP checksums left to offload (unverifiable)", self.checksum_unverified);
        }
        for n in &self.notes {
            s += &format!("; {n}");
        }
        s
    }
}
