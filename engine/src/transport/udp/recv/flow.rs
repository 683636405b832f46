//! One flow being received on: whose datagrams count (the first sender becomes the peer),
//! their accounting into the flow's sequence tracker, and the iperf2 server report that
//! answers its FIN.

use super::msg::{parse_name, NAME_LEN};
use super::UdpFlowReceived;
use crate::metrics::seq::{LiveStats, SeqTracker};
use crate::wire::iperf2::{ServerReport, TransitReport, SERVER_ACKFIN_TRIES};
use crate::wire::udp_payload::{DatagramHeader, WireTime};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// A flow being received on: its socket, its sequence tracker and its end (FIN, report).
pub(super) struct UdpReceivingFlow {
    pub(super) socket: UdpSocket,
    pub(super) queue: u32,
    pub(super) live: Option<LiveStats>,
    pub(super) tracker: SeqTracker,
    /// Raw source address of the peer, for comparisons without parsing.
    pub(super) peer_name: Option<([u8; NAME_LEN], usize)>,
    pub(super) first_data: Option<Instant>,
    pub(super) last_data: Option<Instant>,
    pub(super) fin_at: Option<Instant>,
    pub(super) strangers: u64,
    pub(super) foreign: u64,
    pub(super) reports_sent: u32,
    pub(super) error: Option<String>,
}

/// The iperf2 report of a flow so far.
fn server_report(flow: &UdpReceivingFlow) -> ServerReport {
    let stats = flow.tracker.stats();
    let stop = match (flow.first_data, flow.fin_at.or(flow.last_data)) {
        (Some(a), Some(b)) => b.saturating_duration_since(a),
        _ => Duration::ZERO,
    };
    let transit = stats.delay.map(|d| TransitReport {
        min_s: d.min_us / 1e6,
        max_s: d.max_us / 1e6,
        sum_s: d.sum_us / 1e6,
        mean_s: d.mean_us() / 1e6,
        m2_s2: 0.0,
        vd_s: 0.0,
        count: d.count as u32,
        cnt_ipg: if stop.as_secs_f64() > 0.0 { (stats.received as f64 / stop.as_secs_f64()) as u32 } else { 0 },
        ipg_sum: 1,
    });
    ServerReport {
        bytes: stats.bytes,
        stop,
        lost: stats.lost,
        out_of_order: stats.out_of_order,
        datagrams: stats.expected,
        jitter_s: stats.jitter_us / 1e6,
        transit,
    }
}

/// Sends the flow's report to `name` (the FIN's source address). Best effort: a report
/// that does not go out is retried at the next FIN.
fn answer(flow: &mut UdpReceivingFlow, name: &[u8]) {
    let report = server_report(flow).encode();
    // SAFETY: a valid socket fd; report and name are live buffers of the lengths passed (name
    // is the kernel-filled sockaddr of the FIN's sender).
    let rc = unsafe {
        libc::sendto(
            flow.socket.as_raw_fd(),
            report.as_ptr().cast(),
            report.len(),
            libc::MSG_DONTWAIT,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc > 0 {
        flow.reports_sent += 1;
    }
}

impl UdpReceivingFlow {
    /// Whether the flow expects nothing more: it saw its FIN or failed.
    #[inline]
    pub(super) fn finished(&self) -> bool {
        self.fin_at.is_some() || self.error.is_some()
    }

    /// Whether `name` is the flow's peer; the first sender becomes it.
    #[inline]
    pub(super) fn is_peer(&mut self, name: &[u8]) -> bool {
        match &self.peer_name {
            Some((raw, n)) => &raw[..*n] == name,
            None => {
                let mut raw = [0u8; NAME_LEN];
                let n = name.len().min(NAME_LEN);
                raw[..n].copy_from_slice(&name[..n]);
                self.peer_name = Some((raw, n));
                true
            }
        }
    }

    /// Accounts the datagrams of one buffer from the peer (`seg` bytes each, the last one
    /// shorter): data to the tracker, a FIN ends the flow and may be answered with a report to
    /// `name`. Returns the data bytes.
    #[inline]
    pub(super) fn account(
        &mut self,
        payload: &[u8],
        seg: usize,
        name: &[u8],
        arrived: WireTime,
        reaped: Instant,
        (answer_fin, header): (bool, DatagramHeader),
    ) -> u64 {
        let mut data_bytes = 0u64;
        for datagram in payload.chunks(seg) {
            match header.decode(datagram) {
                None => self.foreign += 1,
                Some(d) if d.fin => {
                    self.tracker.record_fin(d.seq);
                    if self.fin_at.is_none() {
                        self.fin_at = Some(reaped);
                    }
                    // iperf2 answers each FIN, up to its tries; a flow that never carried
                    // data (a forged FIN, whose source may be a victim's) gets one report.
                    let tries = if self.first_data.is_some() { SERVER_ACKFIN_TRIES + 1 } else { 1 };
                    if answer_fin && self.reports_sent < tries {
                        answer(self, name);
                    }
                }
                Some(d) => {
                    self.tracker.record(d.seq, datagram.len() as u32, d.sent, arrived);
                    data_bytes += datagram.len() as u64;
                    self.first_data.get_or_insert(reaped);
                    self.last_data = Some(reaped);
                }
            }
        }
        data_bytes
    }

    /// What the flow received, for the result.
    pub(super) fn outcome(&self) -> UdpFlowReceived {
        UdpFlowReceived {
            queue: self.queue,
            stats: self.tracker.stats(),
            peer: self.peer_name.as_ref().and_then(|(raw, n)| parse_name(&raw[..*n])),
            duration: match (self.first_data, self.fin_at.or(self.last_data)) {
                (Some(a), Some(b)) => b.saturating_duration_since(a),
                _ => Duration::ZERO,
            },
            strangers: self.strangers,
            foreign: self.foreign,
            reports_sent: self.reports_sent,
            error: self.error.clone(),
        }
    }
}
