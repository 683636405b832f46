//! What `recv --iperf2` is set up with and what it tells: its options, its listeners, the
//! limits in force ([`Caps`]), its events and the summary of a finished client test. The
//! serving loop is in [`super::server`], the tests in flight in `groups`.

use crate::base::spec::Proto;
use crate::metrics::figures::StreamReport;
use crate::metrics::seq::SeqStats;
use std::net::{IpAddr, TcpListener, UdpSocket};

/// What `uringbench recv --iperf2` serves.
pub use crate::compat::PeerRecvOptions as Iperf2RecvOptions;
pub(crate) use crate::compat::PER_SOURCE;
pub use crate::compat::{Caps, PeerEvent, PeerEventSink};

/// The sockets `recv --iperf2` listens on: TCP and UDP on the same port.
pub struct Iperf2Listeners {
    pub tcp: TcpListener,
    pub udp: UdpSocket,
}

impl Iperf2Listeners {
    #[cfg(test)]
    pub(crate) fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.local_addr().ok()
    }
}

/// What `recv --iperf2` tells, as it happens.
pub type Iperf2Event = PeerEvent<Iperf2TestSummary>;

/// Receives the events of [`super::server::serve`]; called from several threads.
pub type Iperf2EventSink = PeerEventSink<Iperf2TestSummary>;

/// One finished client test, as `recv --iperf2` prints it.
#[derive(Debug, Clone)]
pub struct Iperf2TestSummary {
    pub id: u64,
    pub proto: Proto,
    pub peer: IpAddr,
    /// The client's iperf version, when its header said.
    pub client_version: Option<String>,
    /// Flows the client announced (`-P`), and flows that came.
    pub expected_flows: u32,
    pub flows: u32,
    /// Bytes received (TCP: everything to EOF, header included, as iperf2 counts).
    pub bytes: u64,
    /// First flow's start to last flow's end (UDP: the longest flow, first datagram to FIN).
    pub seconds: f64,
    /// UDP accounting summed over the flows.
    pub udp: Option<SeqStats>,
    /// UDP: server reports sent back in answer to FINs.
    pub reports_sent: u32,
    pub notes: Vec<String>,
    pub errors: Vec<String>,
    /// The test as the native report has it (`recv --iperf2 -J`): one queue per flow, our
    /// counts as the receiver's side; the client's side is empty (iperf2 tells us nothing).
    pub report: StreamReport,
}

impl Iperf2TestSummary {
    pub fn bits_per_second(&self) -> f64 {
        crate::metrics::figures::rate(self.bytes, self.seconds)
    }
    pub fn complete(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Names what a header asks the receiver to send, for the refusal message.
pub(crate) fn sending_mode(reverse: bool, full_duplex: bool, legacy_dual: bool, run_now: bool) -> &'static str {
    if full_duplex {
        "--full-duplex"
    } else if reverse {
        "-R (reverse)"
    } else if legacy_dual && run_now {
        "-d (dual test)"
    } else {
        "-r (trade-off test)"
    }
}

/// Why we do not serve a test that needs us to send.
pub(crate) fn refusal(mode: &str) -> String {
    format!(
        "{mode} needs the receiver to send; `uringbench recv --iperf2` only receives (run that test against \
         `iperf -s`, or use `uringbench send --iperf2` for our sending side)"
    )
}
