//! Protocol counters from /proc/net/snmp: TCP retransmissions and UDP drops.
//!
//! Per-flow TCP_INFO tells about the test's own flows; these counters tell whether the host
//! as a whole retransmitted or dropped datagrams in the window (a full receive buffer shows
//! up as `RcvbufErrors` long before anything else does). They belong to
//! the network namespace of the reading process: read them in the namespace the test's
//! sockets live in.
//!
//! The file holds pairs of lines per protocol, a header naming the fields and a line of
//! values: `Tcp: RtoAlgorithm RtoMin ...` then `Tcp: 1 200 ...`.

use serde::Serialize;

use crate::base::error::{Error, Result};

const PATH: &str = "/proc/net/snmp";

/// The protocol counters the verdict looks at. Totals since the namespace was created, or
/// changes over a window after [`SnmpCounters::delta`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SnmpCounters {
    pub tcp_retrans_segs: u64,
    pub tcp_out_segs: u64,
    pub tcp_in_errs: u64,
    pub udp_in_datagrams: u64,
    pub udp_in_errors: u64,
    pub udp_rcvbuf_errors: u64,
    pub udp_sndbuf_errors: u64,
    pub udp_no_ports: u64,
}

impl SnmpCounters {
    /// Reads /proc/net/snmp of the caller's network namespace.
    pub fn read() -> Result<Self> {
        let text = std::fs::read_to_string(PATH).map_err(|e| Error::io(format!("reading {PATH}"), e))?;
        parse_snmp(&text)
    }

    /// What changed from `before` to `after`. A counter that went backwards (the namespace
    /// changed between the two reads) counts as 0, not as a huge wrapped number.
    pub fn delta(before: &Self, after: &Self) -> Self {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Self {
            tcp_retrans_segs: d(after.tcp_retrans_segs, before.tcp_retrans_segs),
            tcp_out_segs: d(after.tcp_out_segs, before.tcp_out_segs),
            tcp_in_errs: d(after.tcp_in_errs, before.tcp_in_errs),
            udp_in_datagrams: d(after.udp_in_datagrams, before.udp_in_datagrams),
            udp_in_errors: d(after.udp_in_errors, before.udp_in_errors),
            udp_rcvbuf_errors: d(after.udp_rcvbuf_errors, before.udp_rcvbuf_errors),
            udp_sndbuf_errors: d(after.udp_sndbuf_errors, before.udp_sndbuf_errors),
            udp_no_ports: d(after.udp_no_ports, before.udp_no_ports),
        }
    }

    /// Retransmitted segments per segment sent, when any were sent.
    #[cfg(test)]
    pub(crate) fn tcp_retrans_ratio(&self) -> Option<f64> {
        (self.tcp_out_segs > 0).then(|| self.tcp_retrans_segs as f64 / self.tcp_out_segs as f64)
    }
}

/// One protocol's (header, values) pair.
struct Section<'a> {
    proto: &'a str,
    names: Vec<&'a str>,
    values: Vec<&'a str>,
}

impl Section<'_> {
    fn get(&self, name: &str) -> Result<u64> {
        let i = self
            .names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| Error::unsupported(format!("{PATH}: no {} {name} counter", self.proto)))?;
        let v = self.values[i];
        v.parse().map_err(|_| Error::unsupported(format!("{PATH}: {} {name} is {v:?}, not a counter", self.proto)))
    }
}

/// Parses the text of /proc/net/snmp.
pub(crate) fn parse_snmp(text: &str) -> Result<SnmpCounters> {
    let sections = sections(text)?;
    let find = |proto: &str| {
        sections
            .iter()
            .find(|s| s.proto == proto)
            .ok_or_else(|| Error::unsupported(format!("{PATH}: no {proto} section")))
    };
    let (tcp, udp) = (find("Tcp")?, find("Udp")?);
    Ok(SnmpCounters {
        tcp_retrans_segs: tcp.get("RetransSegs")?,
        tcp_out_segs: tcp.get("OutSegs")?,
        tcp_in_errs: tcp.get("InErrs")?,
        udp_in_datagrams: udp.get("InDatagrams")?,
        udp_in_errors: udp.get("InErrors")?,
        udp_rcvbuf_errors: udp.get("RcvbufErrors")?,
        udp_sndbuf_errors: udp.get("SndbufErrors")?,
        udp_no_ports: udp.get("NoPorts")?,
    })
}

fn sections(text: &str) -> Result<Vec<Section<'_>>> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() % 2 != 0 {
        return Err(Error::unsupported(format!("{PATH}: {} lines, expected header/value pairs", lines.len())));
    }
    lines
        .chunks(2)
        .enumerate()
        .map(|(i, pair)| {
            let (hp, names) = split_line(pair[0]).ok_or_else(|| bad_line(2 * i + 1))?;
            let (vp, values) = split_line(pair[1]).ok_or_else(|| bad_line(2 * i + 2))?;
            if hp != vp {
                return Err(Error::unsupported(format!("{PATH}: header {hp:?} followed by values for {vp:?}")));
            }
            if names.len() != values.len() {
                return Err(Error::unsupported(format!(
                    "{PATH}: {hp} has {} names but {} values",
                    names.len(),
                    values.len()
                )));
            }
            Ok(Section { proto: hp, names, values })
        })
        .collect()
}

fn split_line(line: &str) -> Option<(&str, Vec<&str>)> {
    let (proto, rest) = line.split_once(':')?;
    let proto = proto.trim();
    (!proto.is_empty() && !proto.contains(char::is_whitespace)).then(|| (proto, rest.split_whitespace().collect()))
}

fn bad_line(n: usize) -> Error {
    Error::unsupported(format!("{PATH}: line {n} is not `Proto: fields...`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on Linux 6.18 (this project's test machine) after a TCP benchmark.
    const CAPTURED: &str = "\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 2 64 191274 0 0 0 0 0 191274 119415 0 0 0 0 0 0 0 0 0 119415
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds InParmProbs InSrcQuenchs InRedirects InEchos InEchoReps InTimestamps InTimestampReps InAddrMasks InAddrMaskReps OutMsgs OutErrors OutRateLimitGlobal OutRateLimitHost OutDestUnreachs OutTimeExcds OutParmProbs OutSrcQuenchs OutRedirects OutEchos OutEchoReps OutTimestamps OutTimestampReps OutAddrMasks OutAddrMaskReps
Icmp: 1 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
IcmpMsg: InType3
IcmpMsg: 1
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 41 21 0 8 0 191228 190759 1 0 10 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 45 0 0 46 0 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn captured_sample() {
        let c = parse_snmp(CAPTURED).unwrap();
        assert_eq!((c.tcp_out_segs, c.tcp_retrans_segs, c.tcp_in_errs), (190_759, 1, 0));
        assert_eq!((c.udp_in_datagrams, c.udp_no_ports, c.udp_in_errors), (45, 0, 0), "Udp, not UdpLite");
        assert_eq!((c.udp_rcvbuf_errors, c.udp_sndbuf_errors), (0, 0));
    }

    #[test]
    fn udp_lite_before_udp_does_not_shadow_it() {
        let swapped = "UdpLite: InDatagrams NoPorts InErrors RcvbufErrors SndbufErrors\nUdpLite: 9 9 9 9 9\n\
Udp: InDatagrams NoPorts InErrors RcvbufErrors SndbufErrors\nUdp: 1 2 3 4 5\n\
Tcp: OutSegs RetransSegs InErrs\nTcp: 10 1 0\n";
        let c = parse_snmp(swapped).unwrap();
        assert_eq!((c.udp_in_datagrams, c.udp_rcvbuf_errors, c.udp_sndbuf_errors), (1, 4, 5));
    }

    #[test]
    fn delta_and_ratio() {
        let before =
            SnmpCounters { tcp_out_segs: 1000, tcp_retrans_segs: 5, udp_rcvbuf_errors: 7, ..Default::default() };
        let after =
            SnmpCounters { tcp_out_segs: 3000, tcp_retrans_segs: 25, udp_rcvbuf_errors: 3, ..Default::default() };
        let d = SnmpCounters::delta(&before, &after);
        assert_eq!((d.tcp_out_segs, d.tcp_retrans_segs), (2000, 20));
        assert_eq!(d.udp_rcvbuf_errors, 0, "a counter that went backwards is 0, not 2^64-4");
        assert_eq!(d.tcp_retrans_ratio(), Some(0.01));
        assert_eq!(SnmpCounters::default().tcp_retrans_ratio(), None, "nothing sent: no ratio");
    }

    #[test]
    fn malformed_samples_are_one_line_errors() {
        let cases: &[(&str, &str)] = &[
            ("", "no Tcp section"),
            ("Tcp: OutSegs RetransSegs\n", "expected header/value pairs"),
            ("Tcp: OutSegs RetransSegs\nUdp: 1 2\n", "followed by values"),
            ("Tcp: OutSegs RetransSegs InErrs\nTcp: 1 2\n", "3 names but 2 values"),
            ("Tcp: OutSegs RetransSegs InErrs\nTcp: 1 x 3\nUdp: InDatagrams\nUdp: 1\n", "RetransSegs is \"x\""),
            ("Tcp: OutSegs RetransSegs InErrs\nTcp: 1 2 3\nUdp: InDatagrams\nUdp: 1\n", "no Udp InErrors"),
            ("garbage\nmore garbage\n", "line 1"),
            ("Tcp: OutSegs RetransSegs InErrs\nTcp: 1 -2 3\nUdp: InDatagrams\nUdp: 1\n", "RetransSegs is \"-2\""),
        ];
        for (text, want) in cases {
            let err = parse_snmp(text).unwrap_err();
            assert!(err.message.contains(want), "{text:?}: expected {want:?} in {err}");
            assert!(!err.message.contains('\n'), "one line: {err}");
        }
    }

    /// One counter of /proc/net/snmp by a reading of its own (names row, then values row).
    fn file_counter(group: &str, name: &str) -> u64 {
        let text = std::fs::read_to_string(PATH).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{group}:"))).collect();
        let at = rows[0].split_whitespace().position(|n| n == name).unwrap();
        rows[1].split_whitespace().nth(at).unwrap().parse().unwrap()
    }

    #[test]
    fn live_read_matches_the_file() {
        // Traffic of our own on loopback, so that both counters are non-zero.
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        rx.recv_from(&mut [0; 1]).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _conn = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let before = (file_counter("Tcp", "OutSegs"), file_counter("Udp", "InDatagrams"));
        let c = SnmpCounters::read().expect("/proc/net/snmp is readable on Linux");
        let after = (file_counter("Tcp", "OutSegs"), file_counter("Udp", "InDatagrams"));
        assert!(before.0 > 0 && before.1 > 0, "our own segments and datagram were counted: {before:?}");
        assert!((before.0..=after.0).contains(&c.tcp_out_segs), "OutSegs {} vs {before:?}..{after:?}", c.tcp_out_segs);
        assert!(
            (before.1..=after.1).contains(&c.udp_in_datagrams),
            "InDatagrams {} vs {before:?}..{after:?}",
            c.udp_in_datagrams
        );
    }
}
