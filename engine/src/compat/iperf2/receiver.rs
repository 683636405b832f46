//! What `recv --iperf2` is set up with and what it tells: its options, its listeners, the
//! limits in force ([`Caps`]), its events and the summary of a finished client test. The
//! serving loop is in [`super::server`], the tests in flight in `groups`.

use crate::base::spec::Proto;
use crate::metrics::seq::SeqStats;
use crate::session::gate::{GateLimits, PAUSE};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};

use std::sync::Arc;

/// Connections still sending their header, and flows, one source address may hold.
pub(crate) const PER_SOURCE: u32 = 64;
/// Connections still sending their header, in total.
pub(crate) const MAX_PENDING: u32 = 512;
/// UDP sessions (client ports) served at once, in total: their sources can be spoofed.
pub(crate) const MAX_UDP_SESSIONS: u32 = 64;
/// Descriptors kept for everything but connections and flows (stdio, listeners, /proc reads).
const RESERVED_FDS: u64 = 16;
/// What `uringbench recv --iperf2` serves.
pub use crate::compat::PeerRecvOptions as Iperf2RecvOptions;

/// The sockets `recv --iperf2` listens on: TCP and UDP on the same port.
pub struct Iperf2Listeners {
    pub tcp: TcpListener,
    pub udp: UdpSocket,
}

impl Iperf2Listeners {
    #[cfg(test)]
    pub(crate) fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.local_addr().ok()
    }
}

/// What the receiver tells its operator, as it happens. Reasons may quote a peer: escape them.
#[derive(Debug, Clone)]
pub enum Iperf2Event {
    Listening {
        tcp: SocketAddr,
        udp: SocketAddr,
        caps: Caps,
    },
    /// A client test (all its flows) ended.
    TestDone(Iperf2TestSummary),
    /// A client asked for something we do not do; TCP: the connection was closed, UDP: its
    /// datagrams are ignored.
    Refused {
        proto: Proto,
        peer: SocketAddr,
        reason: String,
    },
    /// A connection or datagram that never became a test (silent, closed early, over a limit).
    Dropped {
        peer: SocketAddr,
        reason: String,
    },
    /// Refusals of `peer` (`None`: of addresses not told apart) not logged one by one.
    More {
        peer: Option<IpAddr>,
        count: u64,
        seconds: f64,
    },
    /// Accepting (TCP) or taking new clients (UDP) waits: out of descriptors or threads.
    Paused {
        proto: Proto,
        reason: String,
    },
}

/// Receives the events of [`super::server::serve`]; called from several threads.
pub type Iperf2EventSink = Arc<dyn Fn(Iperf2Event) + Send + Sync>;

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
}

impl Iperf2TestSummary {
    pub fn bits_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds
        } else {
            0.0
        }
    }
    pub fn complete(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The limits in force, from the options and the open-file limit: a connection still
/// sending its header holds one descriptor, a flow two (its socket and its ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub pending: u32,
    pub pending_per_source: u32,
    pub flows: u32,
    pub udp_sessions: u32,
}

impl Caps {
    /// The accept gate's limits from these caps; `what` a pending connection sends, what
    /// such connections are `doing`.
    pub(crate) fn gate_limits(&self, what: &'static str, doing: &'static str) -> GateLimits {
        GateLimits {
            total: self.pending as usize,
            per_source: self.pending_per_source as usize,
            what,
            doing,
            per_source_option: "",
        }
    }

    pub(crate) fn for_limit(open_files: u64, max_flows: u32) -> Self {
        let budget = open_files.saturating_sub(RESERVED_FDS);
        let pending = (budget / 4).clamp(1, u64::from(MAX_PENDING)) as u32;
        let flows = ((budget.saturating_sub(u64::from(pending)) / 2).max(1)).min(u64::from(max_flows.max(1))) as u32;
        Self {
            pending,
            // One address never holds more than half the header slots.
            pending_per_source: (pending / 2).clamp(1, PER_SOURCE),
            flows,
            udp_sessions: flows.min(MAX_UDP_SESSIONS),
        }
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

/// Why an intake paused, as `recv --iperf2` says it.
pub(crate) fn paused(what: &str, e: &std::io::Error) -> String {
    let why = match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => "out of file descriptors",
        _ => "out of resources",
    };
    format!("{what} failed ({why}: {e}); trying again every {} ms", PAUSE.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_follow_the_open_file_limit() {
        let small = Caps::for_limit(64, 256);
        assert_eq!(small, Caps { pending: 12, pending_per_source: 6, flows: 18, udp_sessions: 18 });
        let big = Caps::for_limit(1 << 20, 256);
        assert_eq!(big, Caps { pending: MAX_PENDING, pending_per_source: PER_SOURCE, flows: 256, udp_sessions: 64 });
        assert_eq!(Caps::for_limit(3, 0), Caps { pending: 1, pending_per_source: 1, flows: 1, udp_sessions: 1 });
    }
}
