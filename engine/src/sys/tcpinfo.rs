//! `TCP_INFO`: what the kernel's TCP thinks of each flow (the `tcp` keys of docs/output.md).
//!
//! The `libc` crate's `tcp_info` stops at `tcpi_total_retrans`; the fields that explain a
//! slow flow (pacing and delivery rates, and the time spent limited by the receive window or
//! the send buffer) came later, so the struct is declared here, laid out as the kernel's
//! UAPI `struct tcp_info`. The kernel copies `min(len, its size)` bytes, so an older kernel
//! leaves the newer fields zero, which the report treats as "not measured".

use serde::{Deserialize, Serialize};
use std::os::fd::RawFd;

/// `struct tcp_info` up to `tcpi_rcv_wnd` (Linux 6.2).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
}

/// Bytes of the `struct tcp_info` this build reads.
pub(crate) const TCP_INFO_LEN: usize = std::mem::size_of::<RawTcpInfo>();

/// The TCP_INFO figures uringbench reports, in plain units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpInfo {
    /// Smoothed RTT and its variation, microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    /// Congestion window in segments, and the MSS.
    pub cwnd: u32,
    pub snd_mss: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub bytes_received: u64,
    /// Bytes per second.
    pub pacing_rate: u64,
    pub delivery_rate: u64,
    /// Microseconds the connection had data to send, and of those, limited by the peer's
    /// receive window or by the local send buffer (cumulative).
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Peer's advertised window and our own, bytes.
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    /// Reordering events the connection's TCP saw (`tcpi_reord_seen`, Linux 4.19+); absent
    /// where the kernel's TCP_INFO ends before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reord_seen: Option<u32>,
}

/// Bytes of `struct tcp_info` up to and including `tcpi_reord_seen`.
const REORD_SEEN_END: usize = std::mem::offset_of!(RawTcpInfo, reord_seen) + std::mem::size_of::<u32>();

impl TcpInfo {
    /// Reads TCP_INFO of a TCP socket; `None` if the call fails (socket closed).
    pub fn read(fd: RawFd) -> Option<Self> {
        let mut raw = RawTcpInfo::default();
        let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
        // SAFETY: raw is a plain-data struct of `len` bytes; the kernel writes at most `len`.
        let rc = unsafe {
            libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut raw as *mut RawTcpInfo).cast(), &mut len)
        };
        (rc == 0).then(|| Self::from_raw(&raw, len as usize))
    }

    /// Parses a `struct tcp_info` the kernel wrote elsewhere (an element of an MPTCP
    /// subflow array): bytes past the end of `b` read as zero. Also returns
    /// tcpi_bytes_acked, which the flow figures do not carry.
    pub(crate) fn from_bytes(b: &[u8]) -> (Self, u64) {
        let mut raw = RawTcpInfo::default();
        let n = b.len().min(TCP_INFO_LEN);
        // SAFETY: RawTcpInfo is plain data of TCP_INFO_LEN bytes, any bit pattern valid;
        // at most that many bytes are copied into it.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut raw as *mut RawTcpInfo).cast::<u8>(), n) };
        (Self::from_raw(&raw, n), raw.bytes_acked)
    }

    /// The figures of `r`, of which the kernel wrote the first `written` bytes.
    fn from_raw(r: &RawTcpInfo, written: usize) -> Self {
        Self {
            rtt_us: r.rtt,
            rttvar_us: r.rttvar,
            min_rtt_us: r.min_rtt,
            cwnd: r.snd_cwnd,
            snd_mss: r.snd_mss,
            total_retrans: r.total_retrans,
            bytes_sent: r.bytes_sent,
            bytes_retrans: r.bytes_retrans,
            bytes_received: r.bytes_received,
            pacing_rate: r.pacing_rate,
            delivery_rate: r.delivery_rate,
            busy_time_us: r.busy_time,
            rwnd_limited_us: r.rwnd_limited,
            sndbuf_limited_us: r.sndbuf_limited,
            snd_wnd: r.snd_wnd,
            rcv_wnd: r.rcv_wnd,
            reord_seen: (written >= REORD_SEEN_END).then_some(r.reord_seen),
        }
    }
}

/// TCP figures of a set of flows over a window: counters as differences between the window's
/// first and last reading, gauges as read at its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpWindow {
    pub flows: u32,
    pub retransmitted_segments: u64,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// Sums over flows of the busy / receive-window-limited / send-buffer-limited time, µs.
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Mean smoothed RTT over the flows at the end, µs.
    pub rtt_mean_us: f64,
    /// The largest smoothed RTT of any flow, µs: over a side's window or an interval, the
    /// largest the sampler read in it (TCP_INFO at each sample and at most 20 ms apart between
    /// them); from two readings alone, the largest at the end.
    pub rtt_max_us: u32,
    pub cwnd_mean: f64,
    /// Sum of the flows' delivery and pacing rates at the end, bits/s.
    pub delivery_rate_bps: u64,
    pub pacing_rate_bps: u64,
}

impl TcpWindow {
    /// Combines per-flow readings at the start and end of a window (same order, same length).
    pub fn between(start: &[Option<TcpInfo>], end: &[Option<TcpInfo>]) -> Self {
        let mut w = TcpWindow::default();
        let mut rtt_sum = 0u64;
        let mut cwnd_sum = 0u64;
        for (a, b) in start.iter().zip(end) {
            let (Some(a), Some(b)) = (a, b) else { continue };
            w.flows += 1;
            w.retransmitted_segments += u64::from(b.total_retrans.saturating_sub(a.total_retrans));
            w.bytes_sent += b.bytes_sent.saturating_sub(a.bytes_sent);
            w.bytes_retrans += b.bytes_retrans.saturating_sub(a.bytes_retrans);
            w.busy_time_us += b.busy_time_us.saturating_sub(a.busy_time_us);
            w.rwnd_limited_us += b.rwnd_limited_us.saturating_sub(a.rwnd_limited_us);
            w.sndbuf_limited_us += b.sndbuf_limited_us.saturating_sub(a.sndbuf_limited_us);
            rtt_sum += u64::from(b.rtt_us);
            w.rtt_max_us = w.rtt_max_us.max(b.rtt_us);
            cwnd_sum += u64::from(b.cwnd);
            w.delivery_rate_bps += b.delivery_rate * 8;
            w.pacing_rate_bps += b.pacing_rate.saturating_mul(8);
        }
        if w.flows > 0 {
            w.rtt_mean_us = rtt_sum as f64 / f64::from(w.flows);
            w.cwnd_mean = cwnd_sum as f64 / f64::from(w.flows);
        }
        w
    }

    /// Share of the flows' busy time spent limited by the receiver's window.
    pub(crate) fn rwnd_limited_share(&self) -> f64 {
        share(self.rwnd_limited_us, self.busy_time_us)
    }
    pub(crate) fn sndbuf_limited_share(&self) -> f64 {
        share(self.sndbuf_limited_us, self.busy_time_us)
    }
    /// Retransmitted bytes as a share of bytes sent.
    pub(crate) fn retrans_share(&self) -> f64 {
        share(self.bytes_retrans, self.bytes_sent)
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn layout_matches_the_kernel_header() {
        // Offsets in the UAPI `struct tcp_info`: pacing_rate follows 8 bytes + 24 u32s.
        assert_eq!(std::mem::offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, busy_time), 168);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, bytes_sent), 200);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, snd_wnd), 228);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, rcv_wnd), 232);
    }

    #[test]
    fn reads_a_live_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut b, _) = listener.accept().unwrap();
        a.write_all(&[7u8; 100_000]).unwrap();
        let mut buf = vec![0u8; 100_000];
        b.read_exact(&mut buf).unwrap();
        let info = TcpInfo::read(a.as_raw_fd()).expect("TCP_INFO on a connected socket");
        assert!(info.bytes_sent >= 100_000, "sender counted its bytes: {info:?}");
        assert!(info.cwnd > 0 && info.snd_mss > 0, "cwnd and MSS are set: {info:?}");
        let rinfo = TcpInfo::read(b.as_raw_fd()).unwrap();
        assert!(rinfo.bytes_received >= 100_000, "receiver counted its bytes: {rinfo:?}");
        assert_eq!(TcpInfo::read(-1), None, "a bad fd is None, not a panic");
        assert!(info.reord_seen.is_some(), "this kernel (4.19+) says its reordering count: {info:?}");
    }

    #[test]
    fn window_combines_flows() {
        let a = TcpInfo {
            busy_time_us: 100,
            rwnd_limited_us: 10,
            bytes_sent: 1000,
            rtt_us: 50,
            cwnd: 10,
            ..Default::default()
        };
        let b = TcpInfo {
            busy_time_us: 1100,
            rwnd_limited_us: 510,
            bytes_sent: 101_000,
            bytes_retrans: 1000,
            total_retrans: 3,
            rtt_us: 70,
            cwnd: 20,
            ..Default::default()
        };
        let w = TcpWindow::between(&[Some(a), Some(a), None], &[Some(b), Some(b), Some(b)]);
        assert_eq!(w.flows, 2, "a flow without a start reading is left out");
        assert_eq!(w.retransmitted_segments, 6);
        assert!((w.rwnd_limited_share() - 0.5).abs() < 1e-9, "500 of 1000 us limited");
        assert!((w.retrans_share() - 0.01).abs() < 1e-9, "1000 of 100000 bytes retransmitted");
        assert_eq!(w.rtt_max_us, 70);
        assert_eq!(TcpWindow::default().rwnd_limited_share(), 0.0, "no busy time: no share");
    }
}
