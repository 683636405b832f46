//! What every receiver writes as it serves: the native receiver's event lines
//! ([`ServerEvent::render_line`]) and the peer receivers' (`recv --iperf2`, `--iperf3`,
//! `--ntttcp`), which share one event type ([`PeerEvent`]) over their own test summaries. Each
//! summary says only what its tool's test has ([`PeerTest`]); the rest of the lines are one.
//!
//! Reasons and errors may quote what a peer sent: they go through [`shown_text`] here, and the
//! caller escapes control characters in the whole line.

use crate::base::spec::{Proto, Workload};
use crate::base::text::peer_text as shown_text;
use crate::base::units::{format_bits_per_second, group_thousands};
use crate::compat::iperf2::Iperf2TestSummary;
use crate::compat::iperf3::Iperf3TestSummary;
use crate::compat::ntttcp::NtttcpTestSummary;
use crate::compat::{Listening, PeerEvent};
use crate::metrics::document::StreamDocument;
use crate::metrics::figures::Role;
use crate::session::receiver::ServerEvent;
use crate::wire::iperf3::MAX_STREAMS;

impl ServerEvent {
    /// The line `recv` logs for this event.
    pub fn render_line(&self) -> String {
        let incomplete = |complete: bool, errors: &[String]| {
            if complete {
                String::new()
            } else {
                format!(", incomplete: {}", shown_text(&errors.join("; ")))
            }
        };
        match self {
            ServerEvent::Listening { addr } => format!("uringbench recv: listening on {addr}"),
            ServerEvent::SessionStarted { id, peer, spec, placement } => format!(
                "[{id}] test from {peer}: {:?} {:?}, {} queues x {} flows, {:.1} s; {placement}",
                spec.proto,
                spec.workload,
                spec.queues,
                spec.flows_per_queue,
                spec.time_ms as f64 / 1e3
            ),
            ServerEvent::SessionEnded { id, peer, workload: Workload::Rr | Workload::Crr, report } => format!(
                "[{id}] done {peer}: answered {} transactions ({} in the window: {:.0}/s){}",
                report.total_bytes(),
                report.bytes(),
                report.bytes() as f64 / report.window_seconds.max(1e-9),
                incomplete(report.complete, &report.errors)
            ),
            ServerEvent::SessionEnded { id, peer, report, .. } => format!(
                "[{id}] done {peer}: {} {} bytes ({} in the window: {}){}",
                if report.role == Role::Sender { "sent" } else { "received" },
                report.total_bytes(),
                report.bytes(),
                format_bits_per_second(report.bits_per_second()),
                incomplete(report.complete, &report.errors)
            ),
            ServerEvent::SessionFailed { id, peer, error } => format!("[{id}] failed {peer}: {}", shown_text(error)),
            ServerEvent::Refused { peer, reason } => format!("refused test from {peer}: {}", shown_text(reason)),
            ServerEvent::Dropped { peer, reason } => format!("dropped connection from {peer}: {}", shown_text(reason)),
            ServerEvent::Stopping { cause, running } => {
                format!("uringbench recv: {cause}: accepting no more tests, ending {running} running")
            }
            ServerEvent::VariantApplied { name, applied } => format!(
                "receiver variant {name}: {}",
                if applied.is_empty() { "no settings".into() } else { applied.join("; ") }
            ),
            ServerEvent::VariantFailed { name, error } => format!("receiver variant {name}: failed: {error}"),
            ServerEvent::LeftoverReverted { restored } => format!(
                "uringbench recv: reverted the receiver variant an earlier run left applied (killed during a test): {}",
                restored.join("; ")
            ),
            ServerEvent::Suppressed { source, count, seconds } => {
                format!("... and {} more from {source} in the last {seconds} s", group_thousands(*count))
            }
            ServerEvent::AcceptPaused { reason } => {
                format!("uringbench recv: accepting paused: {reason}; retrying until it works")
            }
            ServerEvent::AcceptResumed { paused } => {
                format!("uringbench recv: accepting again ({:.1} s of trouble)", paused.as_secs_f64())
            }
            ServerEvent::LogDropped { count } => format!("uringbench recv: {count} log lines dropped (log queue full)"),
            ServerEvent::Unauthenticated { exposed } => format!(
                "uringbench recv: warning: no --psk-file, and {} is not a private address: anyone who reaches it can run tests here (docs/public-receiver.md)",
                exposed.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// A test another tool sent to one of our peer receivers, as that receiver reports it.
pub trait PeerTest {
    /// The tool, as its receiver's flag and the documents' `peer` name it.
    const TOOL: &'static str;
    /// The line logged when the test ends.
    fn render_line(&self) -> String;
    /// `-J`'s document of the test; `None` when it never ran (then [`PeerTest::error`] says why).
    fn document(&self) -> Option<StreamDocument>;
    fn error(&self) -> String;
    /// What the listening line says after "listening on": the addresses, the clients it is
    /// for, its limits.
    fn listening_line(at: &Listening) -> String;
}

impl<T: PeerTest> PeerEvent<T> {
    /// The line the receiver logs for this event; `None` for the events that only
    /// `--json-stream` writes (a test's start and intervals).
    pub fn render_line(&self) -> Option<String> {
        let (tool, proto_name) = (T::TOOL, |p: &Proto| if *p == Proto::Udp { "UDP" } else { "TCP" });
        Some(match self {
            PeerEvent::Started(_) | PeerEvent::Interval { .. } => return None,
            PeerEvent::Listening(at) => format!("uringbench recv --{tool}: {}", T::listening_line(at)),
            PeerEvent::TestDone(summary) => summary.render_line(),
            PeerEvent::Refused { proto, peer, reason } => {
                format!("refused {tool} {} test from {peer}: {}", proto_name(proto), shown_text(reason))
            }
            PeerEvent::Dropped { peer, reason } => format!("dropped connection from {peer}: {}", shown_text(reason)),
            PeerEvent::More { peer, count, seconds } => format!(
                "... and {count} more from {} in the last {seconds:.0} s",
                peer.map_or("other addresses".to_string(), |p| p.to_string())
            ),
            PeerEvent::Paused { proto, reason } => {
                format!("uringbench recv --{tool}: {} paused: {reason}", proto_name(proto))
            }
        })
    }
}

/// "ADDR" for a listener that has one, "?" where the receiver did not say.
fn addr_of(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or("?".into(), |a| a.to_string())
}

impl PeerTest for Iperf2TestSummary {
    const TOOL: &'static str = "iperf2";

    /// Bytes, rate, and for UDP loss, reordering and jitter.
    fn render_line(&self) -> String {
        let s = self;
        let flows = if s.flows == s.expected_flows {
            format!("{} flow{}", s.flows, if s.flows == 1 { "" } else { "s" })
        } else {
            format!("{} of {} flows", s.flows, s.expected_flows)
        };
        let version = s.client_version.as_ref().map_or("iperf2".to_string(), |v| format!("iperf {v}"));
        let mut line = format!(
            "[{}] iperf2 {} test from {} ({version}, {flows}): {} bytes in {:.3} s = {}",
            s.id,
            if s.proto == Proto::Udp { "UDP" } else { "TCP" },
            s.peer,
            s.bytes,
            s.seconds,
            format_bits_per_second(s.bits_per_second())
        );
        if let Some(u) = &s.udp {
            line += &format!(
                ", lost {}/{} ({:.2}%), out-of-order {}, jitter {:.3} ms, {} datagrams received, {} report{} sent",
                u.lost,
                u.expected,
                100.0 * u.loss_ratio(),
                u.out_of_order,
                u.jitter_us / 1e3,
                u.received,
                s.reports_sent,
                if s.reports_sent == 1 { "" } else { "s" }
            );
            if u.duplicates > 0 {
                line += &format!(", {} duplicates", u.duplicates);
            }
        }
        if !s.errors.is_empty() {
            line += &format!(", incomplete: {}", shown_text(&s.errors.join("; ")));
        }
        if !s.notes.is_empty() {
            line += &format!(" (note: {})", shown_text(&s.notes.join("; ")));
        }
        line
    }

    fn document(&self) -> Option<StreamDocument> {
        Some(self.to_document())
    }

    fn error(&self) -> String {
        self.errors.join("; ")
    }

    fn listening_line(at: &Listening) -> String {
        let caps = &at.caps;
        format!(
            "listening on TCP {} and UDP {} for iperf2 clients (`iperf -c`, `iperf -c -u`); \
             limits: {} connections sending their header ({} per address), {} flows, {} UDP sessions",
            addr_of(at.tcp),
            addr_of(at.udp),
            caps.pending,
            caps.pending_per_source,
            caps.flows,
            caps.udp_sessions
        )
    }
}

impl PeerTest for Iperf3TestSummary {
    const TOOL: &'static str = "iperf3";

    fn render_line(&self) -> String {
        Iperf3TestSummary::render_line(self)
    }

    fn document(&self) -> Option<StreamDocument> {
        self.to_document()
    }

    fn error(&self) -> String {
        self.errors.join("; ")
    }

    fn listening_line(at: &Listening) -> String {
        let auth = at.authorized_users.map_or(String::new(), |n| {
            format!(" with RSA credentials of {n} authorized user{}", if n == 1 { "" } else { "s" })
        });
        format!(
            "listening on TCP {} for iperf3 clients (`iperf3 -c [-u]`, one test at a time){auth}; \
             limits: {} connections sending their cookie ({} per address), {} streams",
            addr_of(at.tcp),
            at.caps.pending,
            at.caps.pending_per_source,
            at.caps.flows.min(MAX_STREAMS)
        )
    }
}

impl PeerTest for NtttcpTestSummary {
    const TOOL: &'static str = "ntttcp";

    fn render_line(&self) -> String {
        let s = self;
        let peers: Vec<String> = s.peers.iter().map(|p| p.to_string()).collect();
        let ports: Vec<String> = s.port_bytes.iter().map(|b| b.to_string()).collect();
        let (proto, what) = match &s.port_datagrams {
            Some(d) => {
                let ports = s.port_bytes.len();
                (
                    "UDP",
                    format!("{ports} port{}, {} datagrams", if ports == 1 { "" } else { "s" }, d.iter().sum::<u64>()),
                )
            }
            None => ("TCP", format!("{} connection{}", s.connections, if s.connections == 1 { "" } else { "s" })),
        };
        let mut line = format!(
            "[{}] ntttcp {proto} test from {} ({what}): {} bytes in {:.3} s = {}; per port: {}",
            s.id,
            peers.join(", "),
            s.bytes(),
            s.seconds,
            format_bits_per_second(s.bits_per_second()),
            ports.join(" ")
        );
        if let Some(w) = &s.window {
            line += &format!(
                "; {} bytes received in all, warm-up {:.1} s and cool-down {:.1} s not counted",
                s.received_bytes,
                w.warmup.as_secs_f64(),
                w.cooldown.as_secs_f64()
            );
        }
        if !s.errors.is_empty() {
            line += &format!(", incomplete: {}", shown_text(&s.errors.join("; ")));
        }
        line
    }

    fn document(&self) -> Option<StreamDocument> {
        self.to_document()
    }

    fn error(&self) -> String {
        self.errors.join("; ")
    }

    /// One port per receiving thread, from the first; TCP with a connection limit, or UDP.
    fn listening_line(at: &Listening) -> String {
        let (proto, first, limit) = match (at.tcp, at.udp) {
            (Some(tcp), _) => ("TCP", tcp, format!("; limit: {} connections", at.caps.flows)),
            (None, Some(udp)) => ("UDP", udp, String::new()),
            (None, None) => return "listening on no port".into(),
        };
        let last = u32::from(first.port()) + at.ports.max(1) - 1;
        format!(
            "listening on {} {proto} ports {}..{last} for NTttcp senders in no-sync mode{limit}",
            first.ip(),
            first.port()
        )
    }
}
