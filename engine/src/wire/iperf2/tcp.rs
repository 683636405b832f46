//! iperf2's TCP test header: what the first word of a stream announces, the whole header a
//! receiver acts on, and the ack a server writes back after it.

use super::{
    be16, be32, put32, upper, CLIENT_HDREXT_LEN, CLIENT_HDR_V1_LEN, HEADER_BOUNCEBACK, HEADER_EXTEND, HEADER_KEYCHECK,
    HEADER_LEN_BIT, HEADER_LEN_MASK, HEADER_V2PEERDETECT, HEADER_VERSION1, HEADER_VERSION2,
};
use crate::wire::udp_payload::WireTime;
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::iperf2::{version_string, IPERF_2_1_8_VERSION, RUN_NOW};

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
}
