//! iperf2 over UDP: the test settings a client puts in every datagram, and the report a
//! server sends back in answer to the client's FIN, with the timing of that exchange.

use super::{
    be16, be32, put32, upper, HEADER32_SMALL_TRIPTIMES, HEADER_EXTEND, HEADER_SEQNO64B, HEADER_UDPTESTS,
    HEADER_VERSION1, HEADER_VERSION2, SERVER_HEADER_EXTEND,
};
use std::time::Duration;

/// The test settings an iperf2 UDP client puts in every datagram , read
/// the way an iperf 2.1.8 server reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpClientHeader {
    pub flags: u32,
    pub upper_flags: u16,
    pub seq64: bool,
    /// Legacy `-d`/`-r`: the server must send back.
    pub legacy_dual: bool,
    pub reverse: bool,
    pub full_duplex: bool,
    /// `--no-udp-fin`: the client sends no FIN and waits for no report.
    pub no_udp_fin: bool,
    pub isochronous: bool,
    pub trip_times: bool,
    pub peer_version: Option<(u32, u32)>,
    /// `-b` rate (bits/s; iperf2 sends its 1 Mbit/s default when unset).
    pub rate_bps: u64,
    /// `-P`: the client's flows (client ports) of this test; 1 when the header says nothing.
    pub threads: u32,
    /// `-t`, when the test is timed (`client_hdr_v1.mAmount` negative, in 10 ms units).
    pub time: Option<Duration>,
}

/// Offsets inside `client_udp_testhdr` (after the 16-byte `UDP_datagram`).
mod udp_off {
    pub(crate) const FLAGS: usize = 16;
    pub(crate) const NUM_THREADS: usize = 20;
    pub(crate) const AMOUNT: usize = 36;
    pub(crate) const UPPER_FLAGS: usize = 48;
    pub(crate) const VERSION_U: usize = 52;
    pub(crate) const VERSION_L: usize = 56;
    pub(crate) const RATE_L: usize = 64;
    pub(crate) const RATE_U: usize = 68;
}

impl UdpClientHeader {
    /// Reads the settings of one datagram; `None` when shorter than the flags word.
    pub fn parse(datagram: &[u8]) -> Option<UdpClientHeader> {
        let flags = be32(datagram, udp_off::FLAGS)?;
        let small = flags & HEADER32_SMALL_TRIPTIMES != 0;
        let headed = !small && flags & (HEADER_VERSION1 | HEADER_VERSION2 | HEADER_EXTEND) != 0;
        let extend = headed && flags & HEADER_EXTEND != 0;
        let version2 = headed && flags & HEADER_VERSION2 != 0;
        let upper_flags = if extend || version2 { be16(datagram, udp_off::UPPER_FLAGS).unwrap_or(0) } else { 0 };
        let stateless = extend && flags & HEADER_UDPTESTS != 0;
        // client_hdr_v1 (threads, amount) is there with VERSION1 or EXTEND.
        let v1 = !small && flags & (HEADER_VERSION1 | HEADER_EXTEND) != 0;
        let threads = be32(datagram, udp_off::NUM_THREADS).filter(|_| v1).map_or(0, |t| t as i32);
        let amount = be32(datagram, udp_off::AMOUNT).filter(|_| v1).map_or(0, |a| a as i32);
        Some(UdpClientHeader {
            flags,
            upper_flags,
            seq64: flags & HEADER_SEQNO64B != 0,
            legacy_dual: headed && flags & HEADER_VERSION1 != 0 && !version2,
            reverse: version2 && upper_flags & upper::REVERSE != 0,
            full_duplex: version2 && upper_flags & upper::FULLDUPLEX != 0,
            no_udp_fin: stateless && upper_flags & upper::NOUDPFIN != 0,
            isochronous: stateless && upper_flags & upper::ISOCH != 0,
            trip_times: small || (extend && upper_flags & upper::TRIPTIME != 0),
            peer_version: if extend {
                Some((be32(datagram, udp_off::VERSION_U)?, be32(datagram, udp_off::VERSION_L)?))
            } else {
                None
            },
            rate_bps: if extend {
                u64::from(be32(datagram, udp_off::RATE_L).unwrap_or(0))
                    | (u64::from(be32(datagram, udp_off::RATE_U).unwrap_or(0) >> 8) << 32)
            } else {
                0
            },
            threads: u32::try_from(threads).unwrap_or(1).max(1),
            time: (amount < 0).then(|| Duration::from_millis(u64::from(amount.unsigned_abs()) * 10)),
        })
    }

    /// Whether the test needs the receiver to send data.
    pub fn receiver_must_send(&self) -> bool {
        self.reverse || self.full_duplex || self.legacy_dual
    }
}

/// Where the server report starts in its datagram: after a zeroed `struct UDP_datagram`.
pub(crate) const SERVER_REPORT_OFFSET: usize = 16;
/// `struct server_hdr_v1`: flags, total_len1/2, stop_sec/usec, error_cnt, outorder_cnt,
/// datagrams, jitter1/2.
pub(crate) const SERVER_HDR_V1_LEN: usize = 40;
/// `struct server_hdr_extension`: transit min/max/sum/mean/m2/vd pairs, cntTransit, cntIPG,
/// IPGsum.
pub(crate) const SERVER_HDR_EXTENSION_LEN: usize = 60;
/// `struct server_hdr_extension2` (2.1+): high words of error, out-of-order, datagrams.
pub(crate) const SERVER_HDR_EXTENSION2_LEN: usize = 12;
/// Length of the report datagram a 2.1.8 server writes.
pub(crate) const SERVER_REPORT_DATAGRAM_LEN: usize =
    SERVER_REPORT_OFFSET + SERVER_HDR_V1_LEN + SERVER_HDR_EXTENSION_LEN + SERVER_HDR_EXTENSION2_LEN;

/// How long an iperf2 UDP client waits for a report before re-sending a FIN
/// (iperf2's `RETRYTIMER`).
pub(crate) const CLIENT_FIN_RETRY_INTERVAL: Duration = Duration::from_millis(10);
/// How many bytes the client reads as the report (iperf2's `MAXUDPBUF`); it takes the
/// first datagram that is not a stale 28-byte TCP-style ack as the report.
pub(crate) const CLIENT_REPORT_READ_LEN: usize = 1470;
/// How many times a server sends its report (iperf2's `TRYCOUNT` 10 with
/// `while (--count)`).
pub(crate) const SERVER_ACKFIN_TRIES: u32 = 9;
/// How long a server waits for silence after each report before it assumes it arrived
///.
pub(crate) const SERVER_ACKFIN_SILENCE: Duration = Duration::from_millis(250);

/// The latency part of a report (`SERVER_HEADER_EXTEND`, sent by `iperf -s -e`), seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TransitReport {
    pub min_s: f64,
    pub max_s: f64,
    pub sum_s: f64,
    pub mean_s: f64,
    /// Sum of squared deviations, s² (sent in µs²).
    pub m2_s2: f64,
    pub vd_s: f64,
    pub count: u32,
    /// Datagrams per second over the test (the server sends `datagrams / duration`).
    pub cnt_ipg: u32,
    pub ipg_sum: u32,
}

/// The report a UDP server sends back to the client at the end (the AckFIN,
/// `struct server_hdr`).
///
/// What an iperf2 client prints from it:
/// "Server Report:" then `0.00-stop` seconds, `bytes`, bandwidth = bytes / stop, `jitter` in
/// ms, `lost`/`datagrams` with the loss percentage, and the out-of-order count when non-zero;
/// with [`TransitReport`] (server ran with `-e`) also latency avg/min/max/stdev and pps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ServerReport {
    /// Payload bytes received.
    pub bytes: u64,
    /// Test duration as the server measured it (first to last datagram).
    pub stop: Duration,
    /// Lost datagrams (iperf2's `error_cnt`).
    pub lost: u64,
    pub out_of_order: u64,
    /// Datagrams the sender sent as far as the server knows (iperf2 sends its highest id).
    pub datagrams: u64,
    /// RFC 3550 jitter, seconds.
    pub jitter_s: f64,
    pub transit: Option<TransitReport>,
}

/// Splits a non-negative value into iperf2's (integer part, millionths) pair.
fn split_pair(value: f64) -> (u32, u32) {
    let value = if value.is_finite() { value.clamp(0.0, f64::from(i32::MAX)) } else { 0.0 };
    let whole = value.trunc();
    (whole as i32 as u32, ((value - whole) * 1e6) as i32 as u32)
}

fn join_pair(whole: u32, millionths: u32) -> f64 {
    f64::from(whole as i32) + f64::from(millionths as i32) / 1e6
}

impl ServerReport {
    /// Encodes the whole report datagram (128 bytes: zeroed `UDP_datagram`, then
    /// `server_hdr`), flags VERSION1 | SEQNO64B (| SERVER_HEADER_EXTEND with transit).
    pub fn encode(&self) -> [u8; SERVER_REPORT_DATAGRAM_LEN] {
        let mut buf = [0u8; SERVER_REPORT_DATAGRAM_LEN];
        let o = SERVER_REPORT_OFFSET;
        let mut flags = HEADER_VERSION1 | HEADER_SEQNO64B;
        if self.transit.is_some() {
            flags |= SERVER_HEADER_EXTEND;
        }
        put32(&mut buf, o, flags);
        put32(&mut buf, o + 4, (self.bytes >> 32) as u32);
        put32(&mut buf, o + 8, self.bytes as u32);
        put32(&mut buf, o + 12, self.stop.as_secs().min(i32::MAX as u64) as u32);
        put32(&mut buf, o + 16, self.stop.subsec_micros());
        put32(&mut buf, o + 20, self.lost as u32);
        put32(&mut buf, o + 24, self.out_of_order as u32);
        put32(&mut buf, o + 28, self.datagrams as u32);
        let (j1, j2) = split_pair(self.jitter_s);
        put32(&mut buf, o + 32, j1);
        put32(&mut buf, o + 36, j2);
        let e = o + SERVER_HDR_V1_LEN;
        if let Some(t) = self.transit {
            for (i, v) in [t.min_s, t.max_s, t.sum_s, t.mean_s, t.m2_s2 * 1e12, t.vd_s].into_iter().enumerate() {
                let (a, b) = split_pair(v);
                put32(&mut buf, e + i * 8, a);
                put32(&mut buf, e + i * 8 + 4, b);
            }
            put32(&mut buf, e + 48, t.count);
            put32(&mut buf, e + 52, t.cnt_ipg);
            put32(&mut buf, e + 56, t.ipg_sum);
        }
        let e2 = e + SERVER_HDR_EXTENSION_LEN;
        put32(&mut buf, e2, (self.lost >> 32) as u32);
        put32(&mut buf, e2 + 4, (self.out_of_order >> 32) as u32);
        put32(&mut buf, e2 + 8, (self.datagrams >> 32) as u32);
        buf
    }

    /// Decodes a report datagram. `None` unless it is one: at least the v1 part, id 0 and
    /// VERSION1 in the flags. The id/flags check matters: a 2.1.8 server that hears more
    /// FINs re-sends whatever it last *read* (iperf2 reads it into its report buffer), so
    /// a client may get its own FIN echoed back, whose flags lack VERSION1.
    pub fn decode(datagram: &[u8]) -> Option<ServerReport> {
        let o = SERVER_REPORT_OFFSET;
        if datagram.len() < o + SERVER_HDR_V1_LEN || be32(datagram, 0)? != 0 {
            return None;
        }
        let flags = be32(datagram, o)?;
        if flags & HEADER_VERSION1 == 0 {
            return None;
        }
        let w = |at: usize| be32(datagram, at).unwrap_or(0);
        let e = o + SERVER_HDR_V1_LEN;
        let e2 = e + SERVER_HDR_EXTENSION_LEN;
        let wide = flags & HEADER_SEQNO64B != 0 && datagram.len() >= e2 + SERVER_HDR_EXTENSION2_LEN;
        let join64 = |low: usize, high: usize| {
            let high = if wide { u64::from(w(high)) } else { 0 };
            (high << 32) | u64::from(w(low))
        };
        let transit = (flags & SERVER_HEADER_EXTEND != 0 && datagram.len() >= e2).then(|| {
            let pair = |i: usize| join_pair(w(e + i * 8), w(e + i * 8 + 4));
            TransitReport {
                min_s: pair(0),
                max_s: pair(1),
                sum_s: pair(2),
                mean_s: pair(3),
                m2_s2: pair(4) * 1e-12,
                vd_s: pair(5),
                count: w(e + 48),
                cnt_ipg: w(e + 52),
                ipg_sum: w(e + 56),
            }
        });
        Some(ServerReport {
            bytes: (u64::from(w(o + 4)) << 32) | u64::from(w(o + 8)),
            stop: Duration::from_secs(u64::from(w(o + 12))) + Duration::from_micros(u64::from(w(o + 16) % 1_000_000)),
            lost: join64(o + 20, e2),
            out_of_order: join64(o + 24, e2 + 4),
            datagrams: join64(o + 28, e2 + 8),
            jitter_s: join_pair(w(o + 32), w(o + 36)),
            transit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::iperf2::IPERF_2_1_8_VERSION;
    use crate::wire::udp_payload::WireTime;

    #[test]
    fn udp_client_header_captured() {
        // Bytes 0..76 of `iperf -c -u -b 1M -t 1 -p 5999` 2.1.8 datagram 1.
        let mut d = vec![0u8; 1470];
        put32(&mut d, 0, 1);
        put32(&mut d, 16, 0x4801_0098);
        put32(&mut d, 20, 1);
        put32(&mut d, 24, 5999);
        put32(&mut d, 36, (-100i32) as u32);
        put32(&mut d, 52, 0x0002_0001);
        put32(&mut d, 56, 0x0008_0003);
        put32(&mut d, 64, 1_048_576);
        let h = UdpClientHeader::parse(&d).expect("long enough");
        assert!(h.seq64, "64-bit sequence numbers");
        assert!(!h.receiver_must_send() && !h.no_udp_fin && !h.trip_times, "a plain -u test asks nothing more");
        assert_eq!(h.peer_version, Some(IPERF_2_1_8_VERSION));
        assert_eq!(h.rate_bps, 1_048_576);
        assert_eq!((h.threads, h.time), (1, Some(Duration::from_secs(1))), "-t 1: amount -100");
        // `iperf -c -u -P 4 -t 2`: 4 threads, amount -200; a nonsense thread count reads as one.
        put32(&mut d, 20, 4);
        put32(&mut d, 36, (-200i32) as u32);
        let h = UdpClientHeader::parse(&d).unwrap();
        assert_eq!((h.threads, h.time), (4, Some(Duration::from_secs(2))));
        put32(&mut d, 20, (-5i32) as u32);
        assert_eq!(UdpClientHeader::parse(&d).unwrap().threads, 1);

        put32(&mut d, 16, 0x4C01_0098 | HEADER_UDPTESTS);
        d[48..50].copy_from_slice(&(upper::REVERSE | upper::NOUDPFIN).to_be_bytes());
        let h = UdpClientHeader::parse(&d).unwrap();
        assert!(h.reverse && h.no_udp_fin && h.receiver_must_send(), "-R over UDP: VERSION2 + REVERSE");

        let ours = {
            let mut b = [0u8; 20];
            crate::wire::udp_payload::encode(&mut b, 1, WireTime::default()).unwrap();
            b
        };
        let h = UdpClientHeader::parse(&ours).unwrap();
        assert!(h.seq64 && h.peer_version.is_none() && !h.receiver_must_send(), "our header asks for nothing");
        assert_eq!((h.threads, h.time), (1, None), "one flow, no time");
        assert_eq!(UdpClientHeader::parse(&[0u8; 19]), None);
    }

    #[test]
    fn server_report_layout() {
        let r = ServerReport {
            bytes: 0x1_0000_0005,
            stop: Duration::from_micros(10_250_000),
            lost: 3,
            out_of_order: 2,
            datagrams: 0x2_0000_0001,
            jitter_s: 0.000_125,
            transit: None,
        };
        let d = r.encode();
        assert_eq!(d.len(), 128, "16-byte zeroed datagram header + 112-byte server_hdr");
        assert!(d[..16].iter().all(|&b| b == 0), "UDP_datagram part is zero (id 0)");
        assert_eq!(be32(&d, 16), Some(HEADER_VERSION1 | HEADER_SEQNO64B), "flags");
        assert_eq!((be32(&d, 20), be32(&d, 24)), (Some(1), Some(5)), "total_len1/2");
        assert_eq!((be32(&d, 28), be32(&d, 32)), (Some(10), Some(250_000)), "stop_sec/usec");
        assert_eq!((be32(&d, 36), be32(&d, 40), be32(&d, 44)), (Some(3), Some(2), Some(1)), "error, ooo, datagrams");
        assert_eq!((be32(&d, 48), be32(&d, 52)), (Some(0), Some(125)), "jitter1 s, jitter2 us");
        assert_eq!(be32(&d, 16 + 40 + 60 + 8), Some(2), "datagrams2 in extension2");
        let back = ServerReport::decode(&d).expect("decodes");
        assert_eq!(back.bytes, r.bytes);
        assert_eq!(back.stop, r.stop);
        assert_eq!((back.lost, back.out_of_order, back.datagrams), (3, 2, r.datagrams));
        assert!((back.jitter_s - r.jitter_s).abs() < 1e-9);
        assert_eq!(back.transit, None);
    }

    #[test]
    fn server_report_with_transit_round_trips() {
        let t = TransitReport {
            min_s: 0.000_05,
            max_s: 0.002,
            sum_s: 1.5,
            mean_s: 0.000_3,
            m2_s2: 2e-9,
            vd_s: 0.0,
            count: 5000,
            cnt_ipg: 500,
            ipg_sum: 1,
        };
        let r = ServerReport { datagrams: 5000, transit: Some(t), ..Default::default() };
        let back = ServerReport::decode(&r.encode()).expect("decodes").transit.expect("transit kept");
        assert!((back.min_s - t.min_s).abs() < 1e-6 && (back.max_s - t.max_s).abs() < 1e-6);
        assert!((back.m2_s2 - t.m2_s2).abs() < 1e-12, "m2 travels in us^2");
        assert_eq!((back.count, back.cnt_ipg), (5000, 500));
    }

    #[test]
    fn server_report_rejects_echoes_and_runts() {
        let mut fin = [0u8; 128];
        crate::wire::udp_payload::encode_fin(&mut fin, 95, WireTime { sec: 5, usec: 0 }).unwrap();
        assert_eq!(ServerReport::decode(&fin), None, "an echoed FIN is not a report");
        let mut iperf_fin = [0u8; 128];
        put32(&mut iperf_fin, 16, 0x4801_0098);
        assert_eq!(ServerReport::decode(&iperf_fin), None, "flags without VERSION1");
        let report = ServerReport::default().encode();
        assert!(ServerReport::decode(&report[..56]).is_some(), "v1 part alone is enough (pre-2.1 servers)");
        assert_eq!(ServerReport::decode(&report[..55]), None, "shorter is not a report");
    }
}
