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

/// iperf2's default port (`iperf -s`), used by `--iperf2` modes.
pub const IPERF2_PORT: u16 = 5001;

use crate::wire::udp_payload::WireTime;
use std::time::Duration;

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

// ---- TCP ----------------------------------------------------------------------------------

/// Whether a TCP stream starting with `word` is taken as plain data by an iperf2 2.1.8
/// server: no BOUNCEBACK and none of
/// VERSION1, VERSION2, EXTEND. Our senders' payload must pass this to be counted by
/// `iperf -s`; a byte pattern `[b; 4]` does when `b & 0xC4 == 0` (e.g. 0x00, 0x30 '0', 0x3a),
/// while 0x5a, for one, sets EXTEND, KEYCHECK and V2PEERDETECT and is refused.
pub(crate) fn is_plain_tcp_first_word(word: u32) -> bool {
    word & (HEADER_BOUNCEBACK | HEADER_VERSION1 | HEADER_VERSION2 | HEADER_EXTEND) == 0
}

/// What the first 32-bit word of an accepted iperf2 TCP stream announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpClientKind {
    /// No header: every byte, these four included, is test data (`--compat` clients, old
    /// clients, and other tools).
    PlainData,
    /// A test header of [`TcpHeaderWord::len_bytes`] bytes (these four included) comes first.
    Header(TcpHeaderWord),
    /// A `--bounceback` (request/response) test, not a stream.
    BounceBack,
}

/// What the first word of a header says; the rest needs [`TcpClientHeader::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpHeaderWord {
    pub flags: u32,
    /// Header bytes including this word (and the permit-key length field when
    /// [`Self::permit_key`]); read `len_bytes - 4` more before any data.
    pub len_bytes: u32,
    /// The client blocks reading a [`ClientHdrAck`] after its header (`-X`): the receiver must
    /// send one or the client never starts.
    pub needs_ack: bool,
    /// An iperf2 server would send the ack (also to plain 2.1.8 clients, which never read it).
    pub iperf2_server_acks: bool,
    /// Legacy `-d`/`-r` test (VERSION1 without VERSION2): the server must connect back.
    pub legacy_dual: bool,
    /// Reverse or full duplex requested, known from this word alone (VERSION2 without peer
    /// detect); with peer detect only the upper flags tell.
    pub reverse_or_full_duplex: bool,
    /// A permit key (length field inside the header, value after it) is present.
    pub permit_key: bool,
}

impl TcpHeaderWord {
    /// Bytes of header still to read after the first word.
    pub fn rest_len(&self) -> u32 {
        self.len_bytes.saturating_sub(4)
    }
}

/// Classifies the first word of a TCP stream the way an iperf2 2.1.8 server does
/// (its TCP settings and header-length rules).
pub fn classify_tcp_first_word(flags: u32) -> TcpClientKind {
    if flags & HEADER_BOUNCEBACK != 0 {
        return TcpClientKind::BounceBack;
    }
    if is_plain_tcp_first_word(flags) {
        return TcpClientKind::PlainData;
    }
    let len_bytes = if flags & HEADER_LEN_BIT != 0 {
        (flags & HEADER_LEN_MASK) >> 1
    } else {
        let mut len = 0;
        if flags & (HEADER_VERSION1 | HEADER_EXTEND) != 0 {
            len = CLIENT_HDR_V1_LEN;
        }
        if flags & (HEADER_VERSION2 | HEADER_EXTEND) != 0 {
            len += CLIENT_HDREXT_LEN;
        }
        len
    };
    let version2 = flags & HEADER_VERSION2 != 0;
    let peer_detect = flags & HEADER_V2PEERDETECT != 0;
    TcpClientKind::Header(TcpHeaderWord {
        flags,
        // A header shorter than its own first word cannot be: treat as just the word.
        len_bytes: len_bytes.max(4),
        needs_ack: peer_detect,
        iperf2_server_acks: (!version2 && flags & HEADER_EXTEND != 0) || peer_detect,
        legacy_dual: flags & HEADER_VERSION1 != 0 && !version2,
        reverse_or_full_duplex: version2 && !peer_detect,
        permit_key: flags & HEADER_KEYCHECK != 0,
    })
}

/// How much a client asked to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestAmount {
    /// `-t`: duration (iperf2 sends it negated, in units of 10 ms).
    Time(Duration),
    /// `-n`: bytes.
    Bytes(u64),
}

/// A whole iperf2 TCP test header (`struct client_tcp_testhdr`), the
/// fields a receiver acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpClientHeader {
    pub word: TcpHeaderWord,
    pub num_threads: i32,
    pub port: i32,
    /// `-l` when the client set it explicitly.
    pub buf_len: Option<u32>,
    pub amount: TestAmount,
    pub upper_flags: u16,
    pub reverse: bool,
    pub full_duplex: bool,
    pub trip_times: bool,
    /// Isochronous or periodic-burst test.
    pub bursty: bool,
    /// Client version words, when the extended header is present.
    pub peer_version: Option<(u32, u32)>,
    /// `-b` rate, bits/s (0 when unset).
    pub rate_bps: u64,
    /// Bytes of permit key following the header (skip them, or refuse the test: a 2.1.8 server
    /// without `--permit-key` refuses keyed clients).
    pub permit_key_len: u16,
}

/// Offsets inside `client_tcp_testhdr`.
mod tcp_off {
    pub(crate) const NUM_THREADS: usize = 4;
    pub(super) const PORT: usize = 8;
    pub(crate) const BUF_LEN: usize = 12;
    pub(crate) const AMOUNT: usize = 20;
    pub(crate) const UPPER_FLAGS: usize = 32;
    pub(crate) const VERSION_U: usize = 36;
    pub(crate) const VERSION_L: usize = 40;
    pub(crate) const RATE_L: usize = 48;
    pub(crate) const RATE_U: usize = 52;
}

impl TcpClientHeader {
    /// Parses the header bytes (first word included, `word.len_bytes` of them or more).
    /// Fields beyond the bytes given read as zero, as iperf2's zeroed buffer would.
    pub fn parse(word: TcpHeaderWord, header: &[u8]) -> TcpClientHeader {
        let hdr = &header[..header.len().min(word.len_bytes as usize)];
        let get = |at: usize| be32(hdr, at).unwrap_or(0);
        let extend = word.flags & HEADER_EXTEND != 0;
        let upper_flags = if extend { be16(hdr, tcp_off::UPPER_FLAGS).unwrap_or(0) } else { 0 };
        let version2 = word.flags & HEADER_VERSION2 != 0;
        let amount = get(tcp_off::AMOUNT) as i32;
        let permit_key_len = if word.permit_key && word.len_bytes >= 2 {
            be16(hdr, word.len_bytes as usize - 2).unwrap_or(0)
        } else {
            0
        };
        TcpClientHeader {
            word,
            num_threads: get(tcp_off::NUM_THREADS) as i32,
            port: get(tcp_off::PORT) as i32,
            buf_len: match get(tcp_off::BUF_LEN) {
                0 => None,
                n => Some(n),
            },
            amount: if amount < 0 {
                TestAmount::Time(Duration::from_millis(u64::from(amount.unsigned_abs()) * 10))
            } else {
                TestAmount::Bytes(amount as u64)
            },
            upper_flags,
            // iperf2's listener: reverse and full duplex count only with VERSION2.
            reverse: version2 && upper_flags & upper::REVERSE != 0,
            full_duplex: version2 && upper_flags & upper::FULLDUPLEX != 0,
            trip_times: upper_flags & upper::TRIPTIME != 0,
            bursty: upper_flags & (upper::ISOCH | upper::PERIODICBURST) != 0,
            peer_version: extend.then(|| (get(tcp_off::VERSION_U), get(tcp_off::VERSION_L))),
            rate_bps: if extend {
                u64::from(get(tcp_off::RATE_L)) | (u64::from(get(tcp_off::RATE_U) >> 8) << 32)
            } else {
                0
            },
            permit_key_len,
        }
    }

    /// Whether the test needs the receiver to send data (which a receive-only peer refuses).
    pub fn receiver_must_send(&self) -> bool {
        self.reverse || self.full_duplex || self.word.legacy_dual
    }

    /// Length of the ack this client reads: 52 bytes with `--trip-times`, else 28
    ///.
    pub fn ack_len(&self) -> usize {
        if self.trip_times {
            ACK_LEN_TRIPTIMES
        } else {
            ACK_LEN
        }
    }
}

/// `CLIENTHDRACK`, the type word of the ack.
pub(crate) const CLIENTHDRACK: u32 = 2;
/// The ack without timestamps: type, length, flags, version_u, version_l, reserved1,
/// reserved2 (`struct client_hdr_ack` minus `client_hdr_ack_ts`).
pub(crate) const ACK_LEN: usize = 28;
/// The ack with the three trip-time timestamps.
pub(crate) const ACK_LEN_TRIPTIMES: usize = 52;

/// Timestamps of a trip-times ack: when the client sent its header, when the server read it,
/// when the server sent the ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckTimes {
    pub sent: WireTime,
    pub sent_rx: WireTime,
    pub ack: WireTime,
}

/// The ack a server writes after a client's TCP header: the client
/// learns the server's version (and, with trip times, the clock offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHdrAck {
    pub version: (u32, u32),
    pub flags: u32,
    pub times: Option<AckTimes>,
}

impl ClientHdrAck {
    /// Encodes the ack: 28 bytes, or 52 with timestamps.
    pub fn encode(&self) -> Vec<u8> {
        let len = if self.times.is_some() { ACK_LEN_TRIPTIMES } else { ACK_LEN };
        let mut buf = vec![0u8; len];
        put32(&mut buf, 0, CLIENTHDRACK);
        put32(&mut buf, 4, len as u32);
        put32(&mut buf, 8, self.flags);
        put32(&mut buf, 12, self.version.0);
        put32(&mut buf, 16, self.version.1);
        if let Some(t) = self.times {
            for (i, ts) in [t.sent, t.sent_rx, t.ack].into_iter().enumerate() {
                put32(&mut buf, 28 + i * 8, ts.sec);
                put32(&mut buf, 32 + i * 8, ts.usec);
            }
        }
        buf
    }

    /// Decodes an ack; `None` when too short or not of type `CLIENTHDRACK`.
    pub fn decode(buf: &[u8]) -> Option<ClientHdrAck> {
        if buf.len() < ACK_LEN || be32(buf, 0)? != CLIENTHDRACK {
            return None;
        }
        let ts = |at: usize| Some(WireTime { sec: be32(buf, at)?, usec: be32(buf, at + 4)? });
        let times = if buf.len() >= ACK_LEN_TRIPTIMES && be32(buf, 4)? as usize >= ACK_LEN_TRIPTIMES {
            Some(AckTimes { sent: ts(28)?, sent_rx: ts(36)?, ack: ts(44)? })
        } else {
            None
        };
        Some(ClientHdrAck { version: (be32(buf, 12)?, be32(buf, 16)?), flags: be32(buf, 8)?, times })
    }
}

// ---- UDP ----------------------------------------------------------------------------------

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

    #[test]
    fn first_words_captured_from_iperf_2_1_8() {
        // `iperf -c` 2.1.8 first words, captured on loopback.
        let TcpClientKind::Header(plain) = classify_tcp_first_word(0x4001_0078) else {
            panic!("a plain 2.1.8 client sends a header")
        };
        assert_eq!(plain.len_bytes, 60, "v1 (24) + extension (36)");
        assert_eq!(plain.rest_len(), 56);
        assert!(!plain.needs_ack, "a plain client does not read the ack");
        assert!(plain.iperf2_server_acks, "but an iperf2 server sends it (EXTEND without VERSION2)");
        assert!(!plain.reverse_or_full_duplex && !plain.legacy_dual && !plain.permit_key);

        let TcpClientKind::Header(x) = classify_tcp_first_word(0x4601_0078) else { panic!("-X sends a header") };
        assert!(x.needs_ack, "-X blocks on the ack");
        assert!(!x.reverse_or_full_duplex, "with peer detect only the upper flags tell");

        let TcpClientKind::Header(r) = classify_tcp_first_word(0x4401_0078) else { panic!("-R sends a header") };
        assert!(r.reverse_or_full_duplex && !r.needs_ack && !r.iperf2_server_acks, "-R: VERSION2 alone");
    }

    #[test]
    fn plain_data_and_other_kinds() {
        assert_eq!(classify_tcp_first_word(0), TcpClientKind::PlainData);
        assert_eq!(classify_tcp_first_word(u32::from_be_bytes(*b"0123")), TcpClientKind::PlainData, "iperf2 filler");
        assert_eq!(classify_tcp_first_word(0x3a3a_3a3a), TcpClientKind::PlainData);
        assert!(!is_plain_tcp_first_word(0x5a5a_5a5a), "0x5a sets EXTEND: not plain for iperf -s");
        assert_eq!(classify_tcp_first_word(HEADER_BOUNCEBACK | HEADER_EXTEND), TcpClientKind::BounceBack);
        let TcpClientKind::Header(longest) = classify_tcp_first_word(HEADER_EXTEND | HEADER_LEN_BIT | HEADER_LEN_MASK)
        else {
            panic!("a header")
        };
        assert_eq!(longest.len_bytes, 255, "the 8-bit length field cannot exceed MAX_HEADER_LEN");
        let TcpClientKind::Header(empty) = classify_tcp_first_word(HEADER_EXTEND | HEADER_LEN_BIT) else { panic!() };
        assert_eq!(empty.len_bytes, 4, "a zero length still covers the first word");
    }

    #[test]
    fn lengths_without_len_bit() {
        let v1 = classify_tcp_first_word(HEADER_VERSION1 | RUN_NOW);
        let TcpClientKind::Header(v1) = v1 else { panic!("VERSION1 is a header") };
        assert_eq!(v1.len_bytes, 24, "client_hdr_v1 only");
        assert!(v1.legacy_dual, "VERSION1 without VERSION2: legacy -d/-r");
        let TcpClientKind::Header(v2) = classify_tcp_first_word(HEADER_VERSION2) else { panic!() };
        assert_eq!(v2.len_bytes, 36, "extension only");
        let TcpClientKind::Header(ext) = classify_tcp_first_word(HEADER_EXTEND) else { panic!() };
        assert_eq!(ext.len_bytes, 60, "EXTEND implies both parts");
    }

    #[test]
    fn parse_reverse_header_captured() {
        // `iperf -c 127.0.0.1 -p 5998 -t 0.2 -R` 2.1.8, first 60 bytes.
        let hex = "44010078000000010000176e0000000000000000ffffffec0000000000000000\
                   04000000000200010008000300000000000000000000000000000000";
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect();
        let TcpClientKind::Header(word) = classify_tcp_first_word(be32(&bytes, 0).unwrap()) else { panic!() };
        let h = TcpClientHeader::parse(word, &bytes);
        assert!(h.reverse && !h.full_duplex, "upper flags 0x0400 at byte 32");
        assert!(h.receiver_must_send(), "-R needs the receiver to send");
        assert_eq!(h.num_threads, 1);
        assert_eq!(h.port, 5998);
        assert_eq!(h.amount, TestAmount::Time(Duration::from_millis(200)), "-t 0.2 sent as -20");
        assert_eq!(h.peer_version.map(|(u, l)| version_string(u, l)), Some("2.1.8".to_string()));
        assert_eq!(h.buf_len, None);
        assert_eq!(h.ack_len(), 28);
    }

    #[test]
    fn permit_key_length_sits_at_the_end_of_the_header() {
        let len = 62u32; // 60 + the 2-byte key length field
        let flags = HEADER_EXTEND | HEADER_KEYCHECK | HEADER_LEN_BIT | (len << 1);
        let mut bytes = vec![0u8; len as usize];
        put32(&mut bytes, 0, flags);
        bytes[60..62].copy_from_slice(&16u16.to_be_bytes());
        let TcpClientKind::Header(word) = classify_tcp_first_word(flags) else { panic!() };
        assert!(word.permit_key);
        assert_eq!(TcpClientHeader::parse(word, &bytes).permit_key_len, 16, "key bytes to skip after the header");
    }

    #[test]
    fn short_header_reads_as_zeros() {
        let TcpClientKind::Header(word) = classify_tcp_first_word(0x4001_0078) else { panic!() };
        let h = TcpClientHeader::parse(word, &[0x40, 0x01, 0x00, 0x78]);
        assert_eq!((h.num_threads, h.upper_flags, h.rate_bps), (0, 0, 0), "missing bytes are zero, no panic");
    }

    #[test]
    fn ack_layout() {
        let ack = ClientHdrAck { version: IPERF_2_1_8_VERSION, flags: 0, times: None };
        let bytes = ack.encode();
        assert_eq!(bytes.len(), 28, "the ack a non-trip-times client reads is 28 bytes");
        assert_eq!(&bytes[0..8], &[0, 0, 0, 2, 0, 0, 0, 28], "type CLIENTHDRACK, length 28");
        assert_eq!(&bytes[12..20], &[0, 2, 0, 1, 0, 8, 0, 3], "version_u, version_l");
        assert_eq!(ClientHdrAck::decode(&bytes), Some(ack));
        let t = WireTime { sec: 1, usec: 2 };
        let timed = ClientHdrAck { times: Some(AckTimes { sent: t, sent_rx: t, ack: t }), ..ack };
        let bytes = timed.encode();
        assert_eq!(bytes.len(), 52);
        assert_eq!(ClientHdrAck::decode(&bytes), Some(timed));
        assert_eq!(ClientHdrAck::decode(&bytes[..27]), None, "too short");
        assert_eq!(ClientHdrAck::decode(&[0u8; 28]), None, "wrong type");
    }

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

    #[test]
    fn version_strings() {
        assert_eq!(version_string(0x0002_0001, 0x0008_0003), "2.1.8");
        assert_eq!(version_string(0x0002_0001, 0x0009_0001), "2.1.9-rc");
        assert_eq!(version_string(0x0002_0002, 0x0000_0005), "2.2.0-master");
    }
}
