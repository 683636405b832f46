//! iperf2 wire formats, so uringbench can be compared against an unmodified iperf 2.1.8 in
//! both directions: our sender against `iperf -s`, `iperf -c` against our
//! receiver.
//!
//! Everything here was read from the iperf2 sources at the 2.1.8 release (commit 4660704b of
//! the sourceforge mirror, 2022-08-11; the Debian `iperf` 2.1.8 binary says "12 August 2022")
//! and checked against datagrams and streams captured from that binary on loopback. The file
//! and line of each fact are given where it is used. All fields are big-endian.
//!
//! ## TCP
//! A 2.1.8 client's first write is a test header unless it runs `--compat`: a plain
//! `iperf -c` sends 60 bytes whose first word is `0x4001_0078` (EXTEND | LEN_BIT | length 60),
//! `-X` (peer version detect) `0x4601_0078`, `-R` and `--full-duplex` `0x4401_0078` with the
//! reverse (0x0400) or full-duplex (0x0800) bit in the upper flags at byte 32. The server
//! decides from the first word alone ([`classify_tcp_first_word`]), reads the rest of the
//! header ([`TcpClientHeader::parse`]), and writes the [`ClientHdrAck`] back when the client
//! asked. After the header every byte is data, to EOF.
//!
//! ## UDP
//! Every datagram of a 2.1.8 client starts with the [`crate::wire::udp_payload`] header and carries
//! its test settings (flags `0x4801_0098`: SEQNO64B | EXTEND | LEN_BIT | 76 bytes). At the end
//! the client sends the negated next sequence number, then waits for the server's report,
//! re-sending a FIN (with the id decremented once more each time) every
//! [`CLIENT_FIN_RETRY_INTERVAL`] up to [`CLIENT_FIN_RETRIES`] times, about 2 s
//!. The server answers each FIN burst with [`ServerReport`] in a
//! 128-byte datagram, up to [`SERVER_ACKFIN_TRIES`] times, waiting
//! [`SERVER_ACKFIN_SILENCE`] for the client to go quiet after each.
//!
//! The flags, versions and byte helpers both share are here; the TCP header and its ack are
//! [`tcp`]'s, the UDP settings and the server report [`udp`]'s.

/// iperf2's default port (`iperf -s`), used by `--iperf2` modes.
pub const IPERF2_PORT: u16 = 5001;

mod tcp;
mod udp;

pub use tcp::{
    classify_tcp_first_word, AckTimes, ClientHdrAck, TcpClientHeader, TcpClientKind, TcpHeaderWord, TestAmount,
};
pub use udp::{ServerReport, TransitReport, UdpClientHeader};
pub(crate) use udp::{CLIENT_FIN_RETRY_INTERVAL, CLIENT_REPORT_READ_LEN, SERVER_ACKFIN_SILENCE, SERVER_ACKFIN_TRIES};

// ---- Client header flags (iperf 2.1.8) ---------------------------------------------------

/// 1.7-style header: a legacy dual (`-d`) or trade-off (`-r`) test when VERSION2 is clear.
pub(crate) const HEADER_VERSION1: u32 = 0x8000_0000;
/// Extended header present (version, rate, upper flags).
pub(crate) const HEADER_EXTEND: u32 = 0x4000_0000;
/// UDP stateless test settings present in every datagram.
pub(crate) const HEADER_UDPTESTS: u32 = 0x2000_0000;
/// A permit key follows the header.
pub(crate) const HEADER_KEYCHECK: u32 = 0x1000_0000;
/// 64-bit UDP sequence numbers (`id` + `id2`).
pub(crate) const HEADER_SEQNO64B: u32 = 0x0800_0000;
/// 2.0.14+ header: reverse or full duplex (with the upper flags), or peer detect.
pub(crate) const HEADER_VERSION2: u32 = 0x0400_0000;
/// The client waits for a [`ClientHdrAck`] (`-X`, `--peer-detect`).
pub(crate) const HEADER_V2PEERDETECT: u32 = 0x0200_0000;
/// `--bounceback` test.
pub(crate) const HEADER_BOUNCEBACK: u32 = 0x0080_0000;
/// UDP "small trip times" header (16-bit flags at offset 16).
pub(crate) const HEADER32_SMALL_TRIPTIMES: u32 = 0x0002_0000;
/// The header length is in [`HEADER_LEN_MASK`].
pub(crate) const HEADER_LEN_BIT: u32 = 0x0001_0000;
/// Header length in bytes, shifted left by one.
pub(crate) const HEADER_LEN_MASK: u32 = 0x0000_01FE;
/// Longest header a 2.1.8 server accepts; the 8-bit length field
/// cannot exceed it (255), so the check there never fires.
pub const MAX_HEADER_LEN: u32 = 256;
/// With VERSION1 and not VERSION2: the legacy dual test runs both directions at once.
pub(crate) const RUN_NOW: u32 = 0x0000_0001;
/// In a server report's flags: the latency extension is filled in.
pub(crate) const SERVER_HEADER_EXTEND: u32 = 0x4000_0000;

/// Upper flags of the extended header (a 16-bit field), the whole field as iperf 2.1.8
/// defines it, so a captured header can be read bit by bit; we act on some of them only.
#[allow(dead_code)]
pub mod upper {
    pub(crate) const ISOCH: u16 = 0x0001;
    pub(crate) const L2ETHPIPV6: u16 = 0x0002;
    pub(crate) const L2LENCHECK: u16 = 0x0004;
    pub(crate) const NOUDPFIN: u16 = 0x0008;
    pub(crate) const TRIPTIME: u16 = 0x0010;
    pub(crate) const ISOCH_SETTINGS: u16 = 0x0040;
    pub(crate) const UNITS_PPS: u16 = 0x0080;
    pub(crate) const BWSET: u16 = 0x0100;
    pub(crate) const FQRATESET: u16 = 0x0200;
    pub(crate) const REVERSE: u16 = 0x0400;
    pub(crate) const FULLDUPLEX: u16 = 0x0800;
    pub(crate) const EPOCH_START: u16 = 0x1000;
    pub(crate) const PERIODICBURST: u16 = 0x2000;
    pub(crate) const WRITEPREFETCH: u16 = 0x4000;
    pub(crate) const TCPQUICKACK: u16 = 0x8000;
}

/// `struct client_hdr_v1`: flags, numThreads, mPort, mBufLen, mWinBand, mAmount.
pub(crate) const CLIENT_HDR_V1_LEN: u32 = 24;
/// `struct client_hdrext`: type, length, upperflags, lowerflags, version_u, version_l,
/// reserved, tos, lRate, uRate, TCPWritePrefetch.
pub(crate) const CLIENT_HDREXT_LEN: u32 = 36;

/// The version words of iperf 2.1.8 as its release binary sends them (captured; the "3" in
/// the low word marks a release build).
pub(crate) const IPERF_2_1_8_VERSION: (u32, u32) = (0x0002_0001, 0x0008_0003);

/// Formats iperf2 version words as iperf2 prints them (`2.1.8`, `2.1.9-rc`, ...).
pub fn version_string(version_u: u32, version_l: u32) -> String {
    let kind = match version_l & 0xFFFF {
        0 => "-dev",
        1 => "-rc",
        2 => "-rc2",
        3 => "",
        4 => "-private",
        5 => "-master",
        _ => "-unk",
    };
    format!("{}.{}.{}{}", version_u >> 16, version_u & 0xFFFF, version_l >> 16, kind)
}

fn be32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at + 4)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn be16(buf: &[u8], at: usize) -> Option<u16> {
    let bytes = buf.get(at..at + 2)?;
    Some(u16::from_be_bytes([bytes[0], bytes[1]]))
}

fn put32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_strings() {
        assert_eq!(version_string(0x0002_0001, 0x0008_0003), "2.1.8");
        assert_eq!(version_string(0x0002_0001, 0x0009_0001), "2.1.9-rc");
        assert_eq!(version_string(0x0002_0002, 0x0000_0005), "2.2.0-master");
    }
}
