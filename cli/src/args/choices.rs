//! The fixed choices of the command line (`ValueEnum`s): placement, steering, output formats,
//! engines. Compiled with the rest of the definitions (see the parent module's note).

use super::*;

/// `recv --placement`: where a NIC queue's thread runs.
#[derive(Clone, Copy, ValueEnum)]
pub enum Placement {
    /// On the CPU the queue's IRQ is delivered to.
    Irq,
    /// On a hyperthread sibling of that CPU, else another CPU of the NIC's node.
    IrqSibling,
    /// On the CPUs of the NIC's NUMA node.
    Numa,
    /// On the allowed CPUs in order, ignoring the NIC.
    Cpus,
}

/// `send --steer`: choose source ports so each flow lands on its own receive queue.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum Steer {
    /// When the receiver's NIC hashes with Toeplitz and reports its key and table.
    Auto,
    /// Leave source ports to the kernel (random hashing onto queues).
    Off,
    /// Ask the receiver to install an ethtool n-tuple rule per flow (forward TCP or UDP
    /// streams), for NICs that do not hash with Toeplitz or do not report their key; removed
    /// at the end.
    Ntuple,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum OnOffAuto {
    Auto,
    On,
    Off,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum Format {
    Text,
    Json,
    Csv,
}

/// `send --iperf3 --rsa-padding`: how the credentials are padded for RSA.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum RsaPaddingArg {
    /// PKCS#1 v1.5: iperf3 servers up to 3.16, and later ones run with --use-pkcs1-padding.
    Pkcs1,
    /// OAEP (SHA-1): iperf3 servers from 3.17 without --use-pkcs1-padding.
    Oaep,
}

/// Which engine moves the datagrams.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Engine {
    /// io_uring over sockets (TCP and UDP).
    Uring,
    /// AF_XDP sockets on NIC queues with uringbench's XDP program (UDP).
    Xdp,
}

/// How `send --engine xdp` makes its frames.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum XdpGenArg {
    /// Written into AF_XDP sockets' UMEMs, sent through their TX rings.
    Xsk,
    /// Made by an XDP program run on live frames (BPF_PROG_RUN), sent through ndo_xdp_xmit.
    Live,
}

/// Where `recv --engine xdp` accounts the frames.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum XdpCountArg {
    /// In user space, from AF_XDP sockets.
    Sockets,
    /// In the XDP program, which drops the frames.
    Kernel,
}

/// Where the receiver's XDP program runs.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum XdpModeArg {
    /// Native (driver) mode, generic when the driver has no XDP support.
    Auto,
    Native,
    Generic,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum TextOrJson {
    Text,
    Json,
}

/// The far end a `send` or `recv` speaks to: uringbench's own, or a peer tool named by
/// `--iperf2`, `--iperf3` or `--ntttcp` (clap lets at most one be given). Decided once from the
/// flags; the commands dispatch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Uringbench,
    Iperf2,
    Iperf3,
    Ntttcp,
}

impl Peer {
    pub fn of(iperf2: bool, iperf3: bool, ntttcp: bool) -> Self {
        match (iperf2, iperf3, ntttcp) {
            (true, _, _) => Peer::Iperf2,
            (_, true, _) => Peer::Iperf3,
            (_, _, true) => Peer::Ntttcp,
            _ => Peer::Uringbench,
        }
    }

    /// A peer tool, not uringbench.
    pub fn is_tool(self) -> bool {
        self != Peer::Uringbench
    }
}

#[cfg(test)]
mod tests {
    use super::Peer;

    #[test]
    fn the_three_flags_make_one_peer() {
        assert_eq!(Peer::of(false, false, false), Peer::Uringbench);
        assert_eq!(Peer::of(true, false, false), Peer::Iperf2);
        assert_eq!(Peer::of(false, true, false), Peer::Iperf3);
        assert_eq!(Peer::of(false, false, true), Peer::Ntttcp);
        assert!(!Peer::Uringbench.is_tool() && Peer::Ntttcp.is_tool());
    }
}
