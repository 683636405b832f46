//! `send --iperf2`: our sender against an unmodified `iperf -s` (TCP) or `iperf -s -u` (UDP),
//! reported as an ordinary [`StreamReport`] whose receiver figures are iperf2's own.
//!
//! - **TCP**: N plain connections, no control channel, sent by the stream workload's own
//!   sending half. The payload byte ('0') has none of iperf2's header flags in its first word
//!   (`is_plain_tcp_first_word` in `wire/iperf2/tcp.rs`), so `iperf -s` takes every byte as
//!   data and counts to EOF. The receiver's figures stay in iperf2's output: the report has
//!   no receiver side, and says what `iperf -s` will print ([`Iperf2Report::iperf2_counts_bytes`]).
//! - **UDP**: the io_uring UDP loop writes iperf2's datagram header, then the end-of-test FIN
//!   exchange ([`FinConfig::iperf2`]) asks the server for its report (bytes, lost/total,
//!   out-of-order, jitter), which becomes the receiver side. No report in time is an error.
//!
//! There is no warm-up or cool-down (iperf2 has none): the window is the whole `-t`.

use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, TestSpec};
use crate::compat::udp::{self as compat_udp, UdpWire};
use crate::compat::{client_halves, connect_tcp, far_side, resolve, stream_report, Intervals};
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{Role, SideReport, StreamReport, UdpFigures};
use crate::runtime::placement::{plan, resolve_cpus, Placement};
use crate::runtime::side::halves::StreamHalves;
use crate::session::sender::SendOptions;
use crate::sys::netpath::PathProbe;
use crate::transport::udp::send::{FinConfig, UdpFlowSent};
use crate::wire::iperf2::{ServerReport, IPERF2_PORT};
use crate::wire::udp_payload::DatagramHeader;
use std::net::SocketAddr;
use std::time::Instant;

/// A test against an iperf2 server: the native report, plus what only iperf2 mode knows.
#[derive(Debug, Clone)]
pub struct Iperf2Report {
    pub stream: StreamReport,
    /// UDP: FIN datagrams sent over all flows.
    pub fins: u32,
    pub notes: Vec<String>,
}

impl Iperf2Report {
    /// TCP: what `iperf -s` 2.1.8 prints as its byte count. Its listener reads the first word
    /// of every connection to classify it, and for a plain-data stream leaves those 4 bytes
    /// out of its count (checked: 1 000 000 bytes written to EOF print as 999 996).
    pub fn iperf2_counts_bytes(&self) -> Option<u64> {
        let s = &self.stream;
        (s.spec.proto == Proto::Tcp).then(|| {
            s.sender.total_bytes().saturating_sub(4 * u64::from(s.sender.queues.iter().map(|q| q.flows).sum::<u32>()))
        })
    }

    /// TCP has no receiver side of ours: the sender's completeness is the test's.
    pub fn complete(&self) -> bool {
        let s = &self.stream;
        match s.spec.proto {
            Proto::Tcp => s.error.is_none() && s.sender.complete,
            Proto::Udp => s.complete(),
        }
    }

    /// The first problem, as one line.
    pub fn first_error(&self) -> Option<String> {
        self.stream.first_error()
    }
}

/// Runs our sender against an unmodified iperf2 server at `opts.target` (the spec's
/// warm-up and cool-down are not used). Errors before data flows (refused, unreachable, bad
/// options) come back as `Err`; afterwards problems are in the report.
pub fn run_send(opts: &SendOptions) -> Result<Iperf2Report> {
    let mut spec = opts.spec.clone();
    (spec.warmup_ms, spec.cooldown_ms) = (0, 0);
    spec.validate()?;
    let caps = opts.kernel.clone();
    caps.require_tcp_stream()?;
    let placement = plan(spec.queues, &resolve_cpus(opts.cpus.as_deref())?, opts.busy_poll, false, false, &opts.fast)?;
    let target = resolve(&opts.target, opts.port, opts.local.family)?;
    let path = PathProbe::to(target.ip(), spec.flows());
    let live = Intervals::new(&opts.stop);
    let (sender, receiver, error, fins, notes) = match spec.proto {
        Proto::Tcp => {
            let halves = client_halves(&spec, &placement, &caps, &path)?;
            let flows = (0..spec.flows())
                .map(|i| Ok((i, connect_tcp(target, &opts.local, &format!("iperf -s{}", port_flag(target)))?)))
                .collect::<Result<_>>()?;
            let mut sender = halves.send(flows, Instant::now(), &live)?;
            sender
                .add_path_notes(["plain data (iperf2 payload '0', no test header), half-close at the end".to_string()]);
            (sender, None, None, 0, Vec::new())
        }
        Proto::Udp => {
            let (sender, sent) = send_udp(&spec, opts, target, &placement, path.interface(), &live)?;
            let missing = sent.iter().filter(|f| f.report.is_none()).count();
            let refused = sent.iter().map(|f| f.refused).sum();
            let error = (missing > 0).then(|| no_report(target, missing, sent.len(), refused));
            let notes = (spec.len > 1470).then(|| {
                format!(
                    "datagrams of {} bytes: start the server with `iperf -s -u -l {}` or it truncates them to 1470",
                    spec.len, spec.len
                )
            });
            let fins = sent.iter().map(|f| f.fins).sum();
            (sender, server_side(&spec, &sent), error, fins, notes.into_iter().collect())
        }
    };
    let stream = stream_report(spec, target, sender, receiver, error, &path, &live);
    Ok(Iperf2Report { stream, fins, notes })
}

/// The UDP sending half: one socket per flow connected to the server, iperf2's datagram
/// header and its FIN exchange, which returns each flow's server report.
fn send_udp(
    spec: &TestSpec,
    opts: &SendOptions,
    target: SocketAddr,
    placement: &Placement,
    iface: Option<&str>,
    live: &Intervals,
) -> Result<(SideReport, Vec<UdpFlowSent>)> {
    let sockets = (0..spec.flows())
        .map(|_| {
            compat_udp::connect_udp(target, &opts.local.for_control())
                .map_err(|e| Error::io(format!("opening a UDP flow to {target}"), e))
        })
        .collect::<Result<Vec<_>>>()?;
    let wire = UdpWire { header: DatagramHeader::Native, fin: Some(FinConfig::iperf2()), serving: false };
    let sent = compat_udp::send_udp(spec, sockets, placement, iface, live, wire, |send| DataPath::UdpSend {
        send,
        len: spec.len,
        iperf2: true,
    })?;
    Ok((sent.side, sent.flows))
}

/// The receiver side from iperf2's server reports: per queue the bytes it received, over the
/// longest of its flows' durations; each flow without a report is one error. `None` when no
/// report came back at all.
fn server_side(spec: &TestSpec, sent: &[UdpFlowSent]) -> Option<SideReport> {
    let reports: Vec<_> = sent.iter().filter_map(|f| f.report.as_ref().map(|r| (f.queue, r))).collect();
    if reports.is_empty() {
        return None;
    }
    let bytes: Vec<(u32, u64)> = reports.iter().map(|(queue, r)| (*queue, r.bytes)).collect();
    let seconds = reports.iter().map(|(_, r)| r.stop.as_secs_f64()).fold(0.0, f64::max);
    let mut side = far_side(spec, Role::Receiver, &bytes, seconds, "iperf2");
    // iperf2's `error_cnt` is its count of sequence gaps as seen, so a datagram that arrived
    // late is in it and again in `outorder_cnt`. `iperf -s` prints the gaps less the late
    // arrivals (clamped at 0), and for its [SUM] line it subtracts over all flows: measured
    // with 2 flows at 200 Mbit/s, one flow reported 27 gaps and no late arrivals, the other no
    // gaps and 17 late arrivals (by all signs the first flow's datagrams, taken on the second
    // one's socket while iperf2 set the flows apart), and [SUM] printed 10 lost. So do we.
    let sum = |f: fn(&ServerReport) -> u64| reports.iter().map(|(_, r)| f(r)).sum::<u64>();
    let (expected, out_of_order) = (sum(|r| r.datagrams), sum(|r| r.out_of_order));
    let lost = sum(|r| r.lost).saturating_sub(out_of_order);
    side.udp = Some(UdpFigures {
        datagrams: expected.saturating_sub(lost),
        lost,
        out_of_order,
        duplicates: 0,
        expected,
        jitter_us: reports.iter().map(|(_, r)| r.jitter_s * 1e6).sum::<f64>() / reports.len() as f64,
        refused: 0,
        delay_us: None,
        window: None,
    });
    side.set_data_path(DataPath::Iperf2Reports { reports: reports.len(), flows: sent.len() });
    side.errors.extend((reports.len()..sent.len()).map(|_| "a flow got no iperf2 server report".to_string()));
    side.complete = side.errors.is_empty();
    Some(side)
}

/// Why the UDP test is incomplete when reports are missing, with what to run there.
fn no_report(target: SocketAddr, missing: usize, flows: usize, refused: u64) -> String {
    format!(
        "no iperf2 server report from {target} for {missing} of {flows} flow{} within {:.1} s of the end{}: \
         is `iperf -s -u{}` running there? (iperf 2.1.8 answers only the first UDP test of a server \
         process: restart it between tests)",
        if flows == 1 { "" } else { "s" },
        FinConfig::iperf2().await_report.as_secs_f64(),
        if refused > 0 { format!(" ({refused} sends were refused: ICMP port unreachable)") } else { String::new() },
        port_flag(target),
    )
}

/// ` -p PORT` when the port is not iperf2's default.
fn port_flag(addr: SocketAddr) -> String {
    if addr.port() == IPERF2_PORT {
        String::new()
    } else {
        format!(" -p {}", addr.port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::send::PAYLOAD_FILL;
    use crate::wire::iperf2::{classify_tcp_first_word, TcpClientKind};
    use std::time::Duration;

    #[test]
    fn our_tcp_payload_is_plain_data_for_iperf2() {
        let word = u32::from_be_bytes([PAYLOAD_FILL; 4]);
        assert_eq!(classify_tcp_first_word(word), TcpClientKind::PlainData, "iperf -s must count our bytes");
    }

    #[test]
    fn server_reports_become_the_receiver_side() {
        let spec = TestSpec { proto: Proto::Udp, queues: 2, ..TestSpec::default() };
        let report = |bytes, secs, datagrams, lost, out_of_order| ServerReport {
            bytes,
            stop: Duration::from_secs_f64(secs),
            lost,
            out_of_order,
            datagrams,
            jitter_s: 0.000_010,
            transit: None,
        };
        let flow = |queue, r: Option<ServerReport>| UdpFlowSent { queue, report: r, ..UdpFlowSent::default() };
        // Flow 0: 1 gap, filled by its 1 late arrival; flow 1: 4 gaps, 1 filled late; flow 2:
        // no gaps, 2 late arrivals (another flow's datagrams): 5 gaps less 4 late, over all flows.
        let sent = [
            flow(0, Some(report(1000, 2.0, 11, 1, 1))),
            flow(1, Some(report(3000, 1.5, 31, 4, 1))),
            flow(1, Some(report(500, 0.5, 5, 0, 2))),
        ];
        let side = server_side(&spec, &sent).expect("two reports");
        assert!(side.complete && side.errors.is_empty());
        assert_eq!((side.bytes(), side.total_bytes(), side.window_seconds), (4500, 4500, 2.0));
        let u = side.udp.as_ref().unwrap();
        assert_eq!(u.expected, 47, "iperf2's total is expected");
        assert_eq!((u.lost, u.out_of_order), (1, 4), "late arrivals are no longer lost, as iperf -s's [SUM]");
        assert_eq!(u.datagrams, 46, "received: expected less the datagrams still lost");
        let late_only = server_side(&spec, &[flow(0, Some(report(500, 0.5, 5, 0, 2)))]).unwrap();
        assert_eq!(late_only.udp.unwrap().lost, 0, "more late arrivals than gaps (duplicates): clamped at 0");
        assert!((u.jitter_us - 10.0).abs() < 1e-9);
        let partial = server_side(&spec, &[sent[0].clone(), flow(1, None)]).unwrap();
        assert!(!partial.complete && partial.errors.len() == 1, "a flow without a report is an error");
        assert!(server_side(&spec, &[flow(0, None)]).is_none(), "no report at all: no receiver side");
    }
}
