//! The header at the front of every uringbench UDP datagram.
//!
//! Every datagram carries a 64-bit sequence number and a send timestamp, and iperf2 must be
//! able to account our datagrams as we account its. iperf2 already
//! carries both in its `struct UDP_datagram`, so we use its layout,
//! big-endian, instead of inventing one:
//!
//! ```text
//! offset  size  field
//!      0     4  id       low 32 bits of the sequence number (negated sequence at the end)
//!      4     4  tv_sec   send time, seconds since the Unix epoch (truncated to 32 bits)
//!      8     4  tv_usec  send time, microseconds (0..1_000_000)
//!     12     4  id2      high 32 bits of the sequence number
//!     16     4  flags    iperf2 client-header flags: we set only HEADER_SEQNO64B
//! ```
//!
//! ## Why the flags word is exactly `0x0800_0000`
//! An iperf2 2.1.8 server reads the flags at offset 16 of each new flow's first datagram
//! when it applies a new flow's UDP settings: `HEADER_SEQNO64B` makes it join `id` and `id2`
//! into one signed 64-bit number; every optional feature (dual test, reverse, isochronous,
//! trip times, L2 checks, no-FIN) is read only when `HEADER_VERSION1`, `HEADER_VERSION2` or
//! `HEADER_EXTEND` is also set. A real `iperf -c -u` sends `0x4801_0098` (SEQNO64B | EXTEND |
//! LEN_BIT | 76-byte length) with its version and rate in bytes 20..76; we leave EXTEND out so
//! the server reads nothing past offset 20 and cannot mistake zeros or filler for a request.
//!
//! ## Sequence numbers and the end of a flow
//! Sequence numbers start at [`FIRST_SEQ`] (1), as iperf2's do. A sender ends a flow by
//! sending the *negated* next sequence number (`-(last + 1)`), a few times: that is how an
//! iperf2 client signals the end, and [`decode`] reports
//! it as [`Datagram::fin`] with the positive sequence number.
//!
//! Senders without `HEADER_SEQNO64B` (iperf2 before 2.0.10) carry a signed 32-bit id only;
//! [`decode`] then ignores `id2` exactly as iperf2 reads a packet id, and such a
//! sender can number at most 2^31 - 1 datagrams before its ids turn negative.

use crate::wire::iperf3::UdpHeader;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Bytes of header at the front of every datagram; shorter datagrams are not ours (nor
/// iperf2's with the 64-bit flag) and [`decode`] returns `None` for them. Also the smallest
/// datagram length a sender may be configured with.
pub const HEADER_LEN: usize = crate::base::spec::UDP_HEADER_LEN as usize;

/// iperf2's `HEADER_SEQNO64B` flag: `id` and `id2` form one 64-bit number.
pub(crate) const FLAG_SEQNO64B: u32 = 0x0800_0000;

/// The flags word we put at offset 16 (see the module documentation for why nothing else).
pub(crate) const FLAGS_WORD: u32 = FLAG_SEQNO64B;

/// The first sequence number of a flow.
pub(crate) const FIRST_SEQ: u64 = 1;

/// The largest sequence number that can be sent: its negation must fit in an `i64`.
pub const MAX_SEQ: u64 = i64::MAX as u64;

/// A wall-clock instant as the header carries it: seconds and microseconds since the Unix
/// epoch, seconds truncated to 32 bits like iperf2's `tv_sec` (good until 2106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WireTime {
    pub sec: u32,
    /// Microseconds within the second; always below 1 000 000 in a valid value.
    pub usec: u32,
}

impl WireTime {
    /// The current wall-clock time (`CLOCK_REALTIME`).
    pub fn now() -> Self {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Self { sec: since.as_secs() as u32, usec: since.subsec_micros() }
    }

    /// From a `timespec`-like pair (kernel receive timestamps); nanoseconds are truncated.
    pub(crate) fn from_nanos_parts(sec: i64, nsec: i64) -> Self {
        Self { sec: sec as u32, usec: (nsec.clamp(0, 999_999_999) / 1000) as u32 }
    }

    /// Microseconds since the epoch (modulo 2^32 seconds).
    pub fn as_micros(&self) -> i64 {
        i64::from(self.sec) * 1_000_000 + i64::from(self.usec)
    }

    /// `self - earlier` in microseconds, signed. Differences of times taken on different
    /// hosts (one-way delay) are only meaningful when the clocks are synchronised.
    pub(crate) fn micros_since(&self, earlier: WireTime) -> i64 {
        self.as_micros() - earlier.as_micros()
    }
}

/// One decoded datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// The sequence number, always positive; for a FIN it is the negated id made positive
    /// again (`last + 1` for the first FIN of an iperf2 client or of ours).
    pub seq: u64,
    /// The sender's timestamp; `None` when the fields are zero or out of range.
    pub sent: Option<WireTime>,
    /// The sender is ending the flow (negative id).
    pub fin: bool,
    /// The sender set `HEADER_SEQNO64B`; otherwise the id was a signed 32-bit number.
    pub seq64: bool,
}

/// Why a header could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// The buffer is shorter than [`HEADER_LEN`].
    BufferTooShort(usize),
    /// The sequence number is 0 or above [`MAX_SEQ`].
    SeqOutOfRange(u64),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooShort(n) => {
                write!(f, "UDP datagram of {n} bytes is shorter than the {HEADER_LEN}-byte header")
            }
            EncodeError::SeqOutOfRange(s) => write!(f, "sequence number {s} is outside 1..=2^63-1"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Writes the header of data datagram `seq` sent at `sent` into the first [`HEADER_LEN`]
/// bytes of `buf`. The rest of `buf` is left as it is.
pub fn encode(buf: &mut [u8], seq: u64, sent: WireTime) -> Result<(), EncodeError> {
    if seq == 0 || seq > MAX_SEQ {
        return Err(EncodeError::SeqOutOfRange(seq));
    }
    write_header(buf, seq as i64, sent)
}

/// Writes the header of a FIN datagram: the negated `seq` (by convention the flow's next,
/// never sent, sequence number).
pub fn encode_fin(buf: &mut [u8], seq: u64, sent: WireTime) -> Result<(), EncodeError> {
    if seq == 0 || seq > MAX_SEQ {
        return Err(EncodeError::SeqOutOfRange(seq));
    }
    write_header(buf, -(seq as i64), sent)
}

fn write_header(buf: &mut [u8], id: i64, sent: WireTime) -> Result<(), EncodeError> {
    let Some(hdr) = buf.get_mut(..HEADER_LEN) else {
        return Err(EncodeError::BufferTooShort(buf.len()));
    };
    let bits = id as u64;
    hdr[0..4].copy_from_slice(&(bits as u32).to_be_bytes());
    hdr[4..8].copy_from_slice(&sent.sec.to_be_bytes());
    hdr[8..12].copy_from_slice(&sent.usec.to_be_bytes());
    hdr[12..16].copy_from_slice(&((bits >> 32) as u32).to_be_bytes());
    hdr[16..20].copy_from_slice(&FLAGS_WORD.to_be_bytes());
    Ok(())
}

fn be32(buf: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&buf[at..at + 4]);
    u32::from_be_bytes(word)
}

/// Decodes the header of a received datagram. `None` for datagrams shorter than
/// [`HEADER_LEN`] and for id 0 (no sender uses it; an iperf2 server report starts with it).
pub fn decode(buf: &[u8]) -> Option<Datagram> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    let id = be32(buf, 0);
    let flags = be32(buf, 16);
    let seq64 = flags & FLAG_SEQNO64B != 0;
    let value: i64 = if seq64 { ((u64::from(be32(buf, 12)) << 32) | u64::from(id)) as i64 } else { id as i32 as i64 };
    if value == 0 {
        return None;
    }
    let (sec, usec) = (be32(buf, 4), be32(buf, 8));
    let sent = if (sec == 0 && usec == 0) || usec >= 1_000_000 { None } else { Some(WireTime { sec, usec }) };
    Some(Datagram { seq: value.unsigned_abs(), sent, fin: value < 0, seq64 })
}

/// Which header a sender writes at the front of its datagrams, and a receiver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DatagramHeader {
    /// Ours, iperf2's layout (this module).
    #[default]
    Native,
    /// iperf3's ([`crate::wire::iperf3::UdpHeader`]): the send time, then the sequence
    /// number, 64 bits wide when `wide`, else 32 (iperf3's default; it wraps at 2^32).
    Iperf3 { wide: bool },
}

impl DatagramHeader {
    /// Writes the header of data datagram `seq` sent at `sent` into the start of `buf`.
    pub fn encode(self, buf: &mut [u8], seq: u64, sent: WireTime) -> Result<(), EncodeError> {
        match self {
            DatagramHeader::Native => encode(buf, seq, sent),
            DatagramHeader::Iperf3 { wide } => {
                if buf.len() < UdpHeader::len(wide) {
                    return Err(EncodeError::BufferTooShort(buf.len()));
                }
                UdpHeader { sec: sent.sec, usec: sent.usec, seq }.encode(wide, buf);
                Ok(())
            }
        }
    }

    /// Reads a received datagram's header; `None` for one that is not a data datagram of
    /// this format. iperf3 datagrams carry no end marker: `fin` is never set.
    pub fn decode(self, buf: &[u8]) -> Option<Datagram> {
        match self {
            DatagramHeader::Native => decode(buf),
            DatagramHeader::Iperf3 { wide } => {
                let h = UdpHeader::decode(buf, wide).filter(|h| h.seq != 0)?;
                let sent =
                    (h.usec < 1_000_000 && (h.sec, h.usec) != (0, 0)).then_some(WireTime { sec: h.sec, usec: h.usec });
                Some(Datagram { seq: h.seq, sent, fin: false, seq64: wide })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: WireTime = WireTime { sec: 1_700_000_000, usec: 123_456 };

    #[test]
    fn layout_matches_iperf2_udp_datagram() {
        let mut buf = [0xEEu8; 32];
        encode(&mut buf, 0x1_2345_6789, T).unwrap();
        assert_eq!(&buf[0..4], &[0x23, 0x45, 0x67, 0x89], "id = low 32 bits, big-endian, at offset 0");
        assert_eq!(&buf[4..8], &1_700_000_000u32.to_be_bytes(), "tv_sec at 4");
        assert_eq!(&buf[8..12], &123_456u32.to_be_bytes(), "tv_usec at 8");
        assert_eq!(&buf[12..16], &[0, 0, 0, 1], "id2 = high 32 bits at 12");
        assert_eq!(&buf[16..20], &[0x08, 0, 0, 0], "flags word: HEADER_SEQNO64B and nothing else");
        assert!(buf[20..].iter().all(|&b| b == 0xEE), "bytes past the header are left alone");
    }

    #[test]
    fn round_trip_data_and_fin() {
        let mut buf = [0u8; HEADER_LEN];
        for seq in [1u64, 2, 0x7FFF_FFFF, 0xFFFF_FFFF, 0x1_0000_0000, MAX_SEQ] {
            encode(&mut buf, seq, T).unwrap();
            assert_eq!(decode(&buf), Some(Datagram { seq, sent: Some(T), fin: false, seq64: true }), "data {seq}");
            encode_fin(&mut buf, seq, T).unwrap();
            assert_eq!(decode(&buf), Some(Datagram { seq, sent: Some(T), fin: true, seq64: true }), "fin {seq}");
        }
    }

    #[test]
    fn fin_is_the_twos_complement_iperf2_sends() {
        let mut buf = [0u8; HEADER_LEN];
        encode_fin(&mut buf, 95, T).unwrap();
        // Captured from `iperf -c -u` 2.1.8 after 94 datagrams: id 0xffffffa1, id2 0xffffffff.
        assert_eq!(&buf[0..4], &(-95i32 as u32).to_be_bytes(), "low word of -95");
        assert_eq!(&buf[12..16], &[0xFF; 4], "high word of -95 is all ones");
    }

    #[test]
    fn real_iperf2_client_datagram_decodes() {
        // First 20 bytes of datagram 2 of `iperf -c 127.0.0.1 -u` 2.1.8 (flags 0x48010098).
        let mut buf = vec![0u8; 1470];
        buf[0..4].copy_from_slice(&2u32.to_be_bytes());
        buf[4..8].copy_from_slice(&T.sec.to_be_bytes());
        buf[8..12].copy_from_slice(&T.usec.to_be_bytes());
        buf[16..20].copy_from_slice(&0x4801_0098u32.to_be_bytes());
        assert_eq!(decode(&buf), Some(Datagram { seq: 2, sent: Some(T), fin: false, seq64: true }));
    }

    #[test]
    fn thirty_two_bit_senders_ignore_id2() {
        let mut buf = [0u8; HEADER_LEN];
        buf[0..4].copy_from_slice(&7u32.to_be_bytes());
        buf[12..16].copy_from_slice(&0xDEAD_BEEFu32.to_be_bytes()); // filler, not a high word
        buf[16..20].copy_from_slice(b"0123"); // iperf2 filler pattern: no SEQNO64B bit
        let d = decode(&buf).expect("a 32-bit datagram");
        assert_eq!((d.seq, d.fin, d.seq64), (7, false, false), "id2 ignored without SEQNO64B");
        buf[0..4].copy_from_slice(&(-8i32).to_be_bytes());
        let d = decode(&buf).expect("a 32-bit FIN");
        assert_eq!((d.seq, d.fin), (8, true), "negative 32-bit id is a FIN of the positive seq");
    }

    #[test]
    fn short_zero_and_invalid_inputs() {
        assert_eq!(decode(&[0u8; HEADER_LEN - 1]), None, "shorter than the header is not a datagram of ours");
        assert_eq!(decode(&[]), None);
        let mut buf = [0u8; HEADER_LEN];
        buf[16..20].copy_from_slice(&FLAGS_WORD.to_be_bytes());
        assert_eq!(decode(&buf), None, "id 0 is never sent (an iperf2 server report starts with it)");
        buf[3] = 5;
        buf[8..12].copy_from_slice(&2_000_000u32.to_be_bytes());
        assert_eq!(decode(&buf).map(|d| d.sent), Some(None), "tv_usec out of range: no timestamp");
        assert_eq!(encode(&mut [0u8; 19], 1, T), Err(EncodeError::BufferTooShort(19)));
        assert_eq!(encode(&mut buf, 0, T), Err(EncodeError::SeqOutOfRange(0)), "sequence numbers start at 1");
        assert_eq!(encode_fin(&mut buf, MAX_SEQ + 1, T), Err(EncodeError::SeqOutOfRange(MAX_SEQ + 1)));
    }

    #[test]
    fn wire_time_arithmetic() {
        let a = WireTime { sec: 10, usec: 999_999 };
        let b = WireTime { sec: 11, usec: 1 };
        assert_eq!(b.micros_since(a), 2, "difference crosses a second boundary");
        assert_eq!(a.micros_since(b), -2, "and is signed");
        assert_eq!(WireTime::from_nanos_parts(5, 1_999), WireTime { sec: 5, usec: 1 }, "nanoseconds truncate");
        assert!(WireTime::now().sec > 1_600_000_000, "now() is wall-clock time");
    }

    #[test]
    fn iperf3_header_round_trips_in_both_widths() {
        for wide in [false, true] {
            let h = DatagramHeader::Iperf3 { wide };
            let mut buf = [0u8; 64];
            h.encode(&mut buf, 7, T).unwrap();
            assert_eq!(&buf[0..4], &T.sec.to_be_bytes(), "seconds first, as iperf3 writes them");
            let seq_at = if wide { &buf[8..16] } else { &buf[8..12] };
            assert_eq!(*seq_at.last().unwrap(), 7);
            let d = h.decode(&buf).unwrap();
            assert_eq!((d.seq, d.sent, d.fin), (7, Some(T), false));
            assert!(h.encode(&mut buf[..UdpHeader::len(wide) - 1], 1, T).is_err());
        }
        assert!(DatagramHeader::Iperf3 { wide: false }.decode(&[0u8; 12]).is_none(), "sequence 0 is no datagram");
        assert!(DatagramHeader::Iperf3 { wide: true }.decode(&[1u8; 15]).is_none(), "too short for 64-bit counters");
    }
}
