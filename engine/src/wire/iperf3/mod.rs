//! iperf3 wire formats, so uringbench can stand on either end of a test with an unmodified
//! iperf3 (3.9 and later; checked against Debian's 3.12): `send --iperf3` against `iperf3 -s`,
//! `iperf3 -c` against `recv --iperf3`. docs/protocol.md describes the exchange in full;
//! what is here is only bytes, each parser bounded and refusing with a reason.
//!
//! - The **control connection** carries a 37-byte [cookie](check_cookie) from the client,
//!   then one-byte [`State`]s (mostly from the server) and two length-prefixed JSON
//!   documents each way: the client's [`Params`], then, at the end, each side's [`Results`].
//! - Every **data connection** (TCP) opens with the same cookie, then carries data only.
//! - **UDP** data sockets are "connected" by a 4-byte datagram each way
//!   ([`UDP_CONNECT_MSG`], [`UDP_CONNECT_REPLY`]); every datagram then starts with
//!   [`UdpHeader`].

pub mod auth;
mod output;
mod params;

use serde_json::{json, Map, Value};

/// iperf3's default port (`iperf3 -s`), used by `--iperf3` modes.
pub const IPERF3_PORT: u16 = 5201;
/// The cookie: 36 characters of `a-z2-7` and a NUL.
pub const COOKIE_LEN: usize = 37;
/// Longest parameter document a server accepts (iperf3 refuses longer ones too).
pub const MAX_PARAMS_LEN: u32 = 8 * 1024;
/// Longest results document we read: a stream's entry is under 300 bytes, and a test has at
/// most [`MAX_STREAMS`] each way; a server's output (`--get-server-output`) adds a line, or
/// with `-J` an object, per stream and second.
pub const MAX_RESULTS_LEN: u32 = 4 * 1024 * 1024;
/// Most parallel streams an iperf3 client asks for (`-P`).
pub const MAX_STREAMS: u32 = 128;
/// Longest TCP block (`-l`) iperf3 accepts.
pub const MAX_TCP_BLOCK: u32 = 1 << 20;
/// UDP datagrams: the header at least, 64 KiB less IPv4 and UDP headers at most.
pub const MIN_UDP_BLOCK: u32 = 16;
pub const MAX_UDP_BLOCK: u32 = 65535 - 28;
/// Longest test iperf3 runs (`-t`), and longest omitted start (`-O`), in seconds.
pub const MAX_TIME: u64 = 86_400;
pub const MAX_OMIT: u64 = 600;
/// The datagram a client sends on a new UDP data socket, and the server's answer; both are
/// 32-bit words written in the host's order, so on the little-endian hosts iperf3 runs on they
/// read as the ASCII text shown. Servers before 3.11 answer [`LEGACY_UDP_CONNECT_REPLY`].
pub const UDP_CONNECT_MSG: [u8; 4] = *b"9876";
pub const UDP_CONNECT_REPLY: [u8; 4] = *b"6789";
pub const LEGACY_UDP_CONNECT_REPLY: [u8; 4] = 987_654_321u32.to_le_bytes();

/// A one-byte state on the control connection (a signed char on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfDone,
    /// The server is busy with another test (or the cookie was wrong).
    AccessDenied,
    /// Followed by two 32-bit big-endian words: iperf3's error number and `errno`.
    ServerError,
}

impl State {
    const TABLE: [(State, i8); 12] = [
        (State::TestStart, 1),
        (State::TestRunning, 2),
        (State::TestEnd, 4),
        (State::ParamExchange, 9),
        (State::CreateStreams, 10),
        (State::ServerTerminate, 11),
        (State::ClientTerminate, 12),
        (State::ExchangeResults, 13),
        (State::DisplayResults, 14),
        (State::IperfDone, 16),
        (State::AccessDenied, -1),
        (State::ServerError, -2),
    ];

    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        Self::TABLE.iter().find(|(s, _)| *s == self).map_or(0, |(_, b)| *b as u8)
    }

    /// The state a byte names; `Err` says what arrived instead.
    pub fn from_byte(byte: u8) -> Result<State, String> {
        Self::TABLE
            .iter()
            .find(|(_, b)| *b as u8 == byte)
            .map(|(s, _)| *s)
            .ok_or_else(|| format!("unknown iperf3 state {}", byte as i8))
    }
}

/// A fresh cookie, as an iperf3 client makes one.
pub fn new_cookie() -> [u8; COOKIE_LEN] {
    const CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut cookie = [0u8; COOKIE_LEN];
    // Uniqueness only, no secrecy: a clock-seeded fallback would do, but the OS never fails here.
    let _ = getrandom::fill(&mut cookie);
    for b in &mut cookie[..COOKIE_LEN - 1] {
        *b = CHARS[usize::from(*b) % CHARS.len()];
    }
    cookie[COOKIE_LEN - 1] = 0;
    cookie
}

/// Whether `bytes` (exactly [`COOKIE_LEN`]) is a cookie as iperf3 clients make them.
pub fn check_cookie(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() != COOKIE_LEN {
        return Err(format!("a cookie is {COOKIE_LEN} bytes, not {}", bytes.len()));
    }
    let (text, end) = bytes.split_at(COOKIE_LEN - 1);
    if end != [0] || !text.iter().all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(b)) {
        return Err("not an iperf3 cookie (36 characters of a-z and 2-7, then NUL)".into());
    }
    Ok(())
}

/// The length a 4-byte prefix announces for the JSON that follows; refused when empty or
/// longer than `max`.
pub fn json_len(prefix: [u8; 4], max: u32) -> Result<usize, String> {
    match u32::from_be_bytes(prefix) {
        0 => Err("an empty JSON message".into()),
        n if n > max => Err(format!("a JSON message of {n} bytes (at most {max} are read)")),
        n => Ok(n as usize),
    }
}

/// A JSON document with its length prefix, ready to write.
pub fn json_message(doc: &Value) -> Vec<u8> {
    let text = doc.to_string();
    let mut out = Vec::with_capacity(4 + text.len());
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// The id iperf3 gives the `index`-th stream of a test (in connection order): 1, then 3, 4, ...
pub fn stream_id(index: usize) -> u64 {
    if index == 0 {
        1
    } else {
        index as u64 + 2
    }
}

pub use output::ServerOutputFacts;
pub use params::{DataProto, GsroSizes, Params, Refusal, MAX_AUTHTOKEN_LEN};

/// A number as iperf3 writes counts: a whole non-negative number (cJSON writes every number
/// as a double, so 1e6 and 1000000.0 are whole).
/// Counts past 2^53 are refused: no real count gets there, and -1 cast to unsigned (as iperf3
/// writes "none") must not read as a count, whether written as 1.8e19 or in full.
fn whole(v: &Value) -> Option<u64> {
    const MAX: u64 = 1 << 53;
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < MAX as f64).map(|f| f as u64))
        .filter(|n| *n < MAX)
}

/// One stream's line of a results document.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamResult {
    pub id: u64,
    /// What this side sent (a sending stream) or received (a receiving stream).
    pub bytes: u64,
    /// A sending TCP stream's retransmitted segments; `None` when unknown.
    pub retransmits: Option<u64>,
    /// UDP, receiving: jitter in seconds, datagrams lost, the highest sequence number seen.
    pub jitter_s: f64,
    pub errors: u64,
    pub packets: u64,
    /// Seconds from the stream's start to its end, by that side's clock.
    pub start_s: f64,
    pub end_s: f64,
}

/// A side's results (the last JSON documents: the client's first, then the server's).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Results {
    /// CPU use in percent of one CPU over the test: total, user, system.
    pub cpu_util: [f64; 3],
    /// 1: the sender's retransmits are counted; 0: not; `None`: this side only received.
    pub sender_has_retransmits: Option<bool>,
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
    /// The server's own output for a client that asked for it (`--get-server-output`), as
    /// text (a server running with `-J` sends `server_output_json` instead, kept whole).
    pub server_output_text: Option<String>,
    pub server_output_json: Option<Value>,
}

impl Results {
    pub fn to_json(&self) -> Value {
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "bytes": s.bytes,
                    "retransmits": s.retransmits.map_or(-1, |r| r as i64),
                    "jitter": s.jitter_s,
                    "errors": s.errors,
                    "omitted_errors": 0,
                    "packets": s.packets,
                    "omitted_packets": 0,
                    "start_time": s.start_s,
                    "end_time": s.end_s,
                })
            })
            .collect();
        let mut doc = json!({
            "cpu_util_total": self.cpu_util[0],
            "cpu_util_user": self.cpu_util[1],
            "cpu_util_system": self.cpu_util[2],
            "sender_has_retransmits": self.sender_has_retransmits.map_or(-1, i64::from),
            "streams": streams,
        });
        if let Some(cc) = &self.congestion_used {
            doc["congestion_used"] = json!(cc);
        }
        if let Some(text) = &self.server_output_text {
            doc["server_output_text"] = json!(text);
        }
        if let Some(output) = &self.server_output_json {
            doc["server_output_json"] = output.clone();
        }
        doc
    }

    /// Reads a results document, with the keys iperf3 itself requires.
    pub fn parse(text: &[u8]) -> Result<Results, String> {
        let doc: Value = serde_json::from_slice(text).map_err(|e| format!("results are not JSON: {e}"))?;
        let j = doc.as_object().ok_or("results are not a JSON object")?;
        let real = |key: &str, o: &Map<String, Value>| {
            o.get(key).and_then(Value::as_f64).ok_or_else(|| format!("results lack a number '{key}'"))
        };
        let cpu_util = [real("cpu_util_total", j)?, real("cpu_util_user", j)?, real("cpu_util_system", j)?];
        let has = real("sender_has_retransmits", j)?;
        let streams = j.get("streams").and_then(Value::as_array).ok_or("results lack a 'streams' list")?;
        if streams.len() > 2 * MAX_STREAMS as usize {
            return Err(format!("results of {} streams (at most {})", streams.len(), 2 * MAX_STREAMS));
        }
        let streams = streams
            .iter()
            .map(|s| {
                let o = s.as_object().ok_or("a stream's results are not an object")?;
                let count =
                    |key: &str| o.get(key).and_then(whole).ok_or_else(|| format!("a stream's '{key}' is not a count"));
                Ok(StreamResult {
                    id: count("id")?,
                    bytes: count("bytes")?,
                    // iperf3 writes "none" as -1, or as -1 cast to unsigned (1.8e19).
                    retransmits: whole(o.get("retransmits").ok_or("a stream lacks 'retransmits'")?),
                    jitter_s: real("jitter", o)?,
                    errors: count("errors")?,
                    packets: count("packets")?,
                    start_s: o.get("start_time").and_then(Value::as_f64).unwrap_or(0.0),
                    end_s: o.get("end_time").and_then(Value::as_f64).unwrap_or(0.0),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Results {
            cpu_util,
            sender_has_retransmits: (has == 0.0 || has == 1.0).then_some(has == 1.0),
            congestion_used: j.get("congestion_used").and_then(Value::as_str).map(|s| s.chars().take(32).collect()),
            streams,
            // The whole document is bounded by MAX_RESULTS_LEN; what is shown of it is the
            // peer's text, for the caller to render as such.
            server_output_text: j.get("server_output_text").and_then(Value::as_str).map(str::to_owned),
            server_output_json: j.get("server_output_json").filter(|v| v.is_object()).cloned(),
        })
    }

    /// The stream with iperf3 id `id`.
    pub fn stream(&self, id: u64) -> Option<&StreamResult> {
        self.streams.iter().find(|s| s.id == id)
    }
}

/// The header of every iperf3 UDP datagram: the send time (seconds and microseconds of the
/// sender's clock) and the sequence number, from 1, 32 bits wide or 64 with
/// `udp_counters_64bit`; all big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub sec: u32,
    pub usec: u32,
    pub seq: u64,
}

impl UdpHeader {
    /// Header length for the counter width.
    pub fn len(wide: bool) -> usize {
        if wide {
            16
        } else {
            12
        }
    }

    /// Writes the header into the start of `buf` (at least [`Self::len`] bytes).
    pub fn encode(&self, wide: bool, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if wide {
            buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        } else {
            buf[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes());
        }
    }

    /// Reads a datagram's header; `None` when it is shorter than one.
    pub fn decode(buf: &[u8], wide: bool) -> Option<UdpHeader> {
        let word = |at: usize| buf.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let seq = if wide {
            let b = buf.get(8..16)?;
            u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        } else {
            u64::from(word(8)?)
        };
        Some(UdpHeader { sec: word(0)?, usec: word(4)?, seq })
    }
}

/// iperf3 error numbers a server sends after [`State::ServerError`], for the refusals it
/// makes: the client prints iperf3's own text for each (`iperf3: error - ...`), so each
/// refusal takes the number whose text names what was refused; ours logs the exact reason.
pub mod error_code {
    /// Test too long.
    pub const DURATION: i32 = 5;
    /// Too many parallel streams.
    pub const NUM_STREAMS: i32 = 6;
    /// Block size too large.
    pub const BLOCK_SIZE: i32 = 7;
    /// Socket buffer size too large.
    pub const BUF_SIZE: i32 = 8;
    /// MSS too large.
    pub const MSS: i32 = 10;
    /// Bad omit value.
    pub const OMIT: i32 = 12;
    /// "an option you are trying to set is not implemented yet".
    pub const UNIMPLEMENTED: i32 = 13;
    /// Invalid burst count.
    pub const BURST: i32 = 15;
    /// No SCTP support available.
    pub const NO_SCTP: i32 = 18;
    /// Bad UDP block size.
    pub const UDP_BLOCK_SIZE: i32 = 20;
    /// Bad TOS value.
    pub const BAD_TOS: i32 = 21;
    /// Total rate over the server's limit.
    pub const TOTAL_RATE: i32 = 27;
    /// Cannot receive the parameters (unreadable or malformed ones).
    pub const RECV_PARAMS: i32 = 114;
    /// Cannot set the IPv6 flow label.
    pub const FLOW_LABEL: i32 = 127;
    /// A protocol (or mode) the server does not run.
    pub const PROTOCOL: i32 = 131;
    /// Cannot set CPU affinity.
    pub const AFFINITY: i32 = 132;
    /// Test authorization failed.
    pub const AUTH: i32 = 142;
    /// Cannot set IP Do-Not-Fragment.
    pub const DONT_FRAGMENT: i32 = 145;
    /// Unable to start the stream listener (an MPTCP test on a host without MPTCP).
    pub const STREAM_LISTEN: i32 = 202;
}

/// iperf3's meaning of an error number a server sent (the ones a client can cause; others
/// by number).
pub fn server_error_text(code: i32) -> String {
    let known = match code {
        error_code::DURATION => "test too long",
        error_code::NUM_STREAMS => "too many parallel streams",
        error_code::BLOCK_SIZE => "block size too large",
        error_code::BUF_SIZE => "socket buffer size too large",
        error_code::MSS => "MSS too large",
        error_code::OMIT => "bad omit value",
        error_code::UNIMPLEMENTED => "an option is not implemented by the server",
        error_code::BURST => "invalid burst count",
        error_code::NO_SCTP => "no SCTP support",
        error_code::UDP_BLOCK_SIZE => "bad UDP block size",
        error_code::BAD_TOS => "bad TOS value",
        error_code::TOTAL_RATE => "total rate over the server's limit",
        error_code::RECV_PARAMS => "parameters not accepted",
        117 => "results not received",
        121 => "server busy",
        error_code::FLOW_LABEL => "cannot set the IPv6 flow label",
        error_code::PROTOCOL => "protocol not served",
        error_code::AFFINITY => "cannot set CPU affinity",
        error_code::AUTH => "test authorization failed",
        error_code::DONT_FRAGMENT => "cannot set IP Do-Not-Fragment",
        error_code::STREAM_LISTEN => "unable to start stream listener",
        208 => "bad stream id in results",
        _ => "",
    };
    if known.is_empty() {
        format!("iperf3 error {code}")
    } else {
        format!("{known} (iperf3 error {code})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's answer to that test: retransmits and has-retransmits as unsigned -1.
    const SERVER_RESULTS_3_12: &str = r#"{"cpu_util_total":64.43,"cpu_util_user":1.39,"cpu_util_system":63.04,"sender_has_retransmits":1.8446744073709552e+19,"congestion_used":"bbr","streams":[{"id":1,"bytes":1439170560,"retransmits":1.8446744073709552e+19,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":1.001738},{"id":3,"bytes":1443102720,"retransmits":1.8446744073709552e+19,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":1.001741}]}"#;

    #[test]
    fn states_round_trip_and_unknown_bytes_are_refused() {
        for (s, b) in State::TABLE {
            assert_eq!(State::from_byte(b as u8), Ok(s));
            assert_eq!(s.byte(), b as u8);
        }
        assert_eq!(State::AccessDenied.byte(), 0xff);
        assert!(State::from_byte(3).unwrap_err().contains("unknown iperf3 state 3"));
    }

    #[test]
    fn cookies_are_made_and_checked_as_iperf3_does() {
        let c = new_cookie();
        check_cookie(&c).expect("ours pass");
        assert_ne!(c, new_cookie(), "random");
        let mut bad = c;
        bad[0] = b'A';
        assert!(check_cookie(&bad).is_err());
        bad = c;
        bad[36] = b'a';
        assert!(check_cookie(&bad).is_err(), "NUL at the end");
        assert!(check_cookie(&c[..36]).is_err());
    }

    #[test]
    fn json_lengths_are_bounded() {
        assert_eq!(json_len(100u32.to_be_bytes(), MAX_PARAMS_LEN), Ok(100));
        assert!(json_len([0; 4], MAX_PARAMS_LEN).is_err());
        assert!(json_len((MAX_PARAMS_LEN + 1).to_be_bytes(), MAX_PARAMS_LEN).unwrap_err().contains("8192"));
        let m = json_message(&json!({"a": 1}));
        assert_eq!(&m[..4], &7u32.to_be_bytes());
        assert_eq!(&m[4..], br#"{"a":1}"#);
    }

    #[test]
    fn real_server_results_parse_with_unsigned_minus_one() {
        let r = Results::parse(SERVER_RESULTS_3_12.as_bytes()).unwrap();
        assert_eq!(r.sender_has_retransmits, None, "a receiving server says -1");
        assert_eq!(r.congestion_used.as_deref(), Some("bbr"));
        assert_eq!(r.streams.len(), 2);
        assert_eq!(r.stream(3).map(|s| s.bytes), Some(1443102720));
        assert_eq!(r.stream(1).unwrap().retransmits, None);
        let full = SERVER_RESULTS_3_12
            .replace("\"retransmits\":1.8446744073709552e+19", "\"retransmits\":18446744073709551615");
        assert_eq!(
            Results::parse(full.as_bytes()).unwrap().stream(3).unwrap().retransmits,
            None,
            "-1 in full is none too"
        );
        assert!((r.stream(1).unwrap().end_s - 1.001738).abs() < 1e-9);
    }

    #[test]
    fn our_results_round_trip_and_bad_ones_are_refused() {
        let r = Results {
            cpu_util: [10.0, 1.0, 9.0],
            sender_has_retransmits: Some(true),
            congestion_used: Some("cubic".into()),
            streams: vec![StreamResult { id: 1, bytes: 42, retransmits: Some(3), end_s: 2.0, ..Default::default() }],
            server_output_text: Some("[1] a test line\n".into()),
            server_output_json: Some(json!({"end": {"sum_received": {"bytes": 42}}})),
        };
        assert_eq!(Results::parse(r.to_json().to_string().as_bytes()).unwrap(), r);
        let refused = |text: &str| Results::parse(text.as_bytes()).unwrap_err();
        assert!(refused(r#"{"cpu_util_total":1}"#).contains("cpu_util_user"));
        let base = r#""cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":0"#;
        assert!(refused(&format!("{{{base}}}")).contains("streams"));
        assert!(refused(&format!(r#"{{{base},"streams":[{{"id":1}}]}}"#)).contains("bytes"));
        assert!(refused(&format!(r#"{{{base},"streams":[{{"id":-1,"bytes":1}}]}}"#)).contains("'id'"));
        let many = vec![r#"{"id":1}"#; 300].join(",");
        assert!(refused(&format!(r#"{{{base},"streams":[{many}]}}"#)).contains("300 streams"));
    }

    #[test]
    fn udp_header_both_widths() {
        let h = UdpHeader { sec: 0x0102_0304, usec: 999_999, seq: 7 };
        let mut buf = [0u8; 16];
        h.encode(false, &mut buf);
        assert_eq!(&buf[8..12], &[0, 0, 0, 7]);
        assert_eq!(UdpHeader::decode(&buf[..12], false), Some(h));
        assert_eq!(UdpHeader::decode(&buf[..11], false), None);
        h.encode(true, &mut buf);
        assert_eq!(&buf[8..16], &7u64.to_be_bytes());
        assert_eq!(UdpHeader::decode(&buf, true), Some(h));
        assert_eq!(UdpHeader::decode(&buf[..15], true), None);
        assert_eq!(UdpHeader::len(true), 16);
    }

    #[test]
    fn stream_ids_skip_two() {
        assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), vec![1, 3, 4, 5]);
        assert_eq!(UDP_CONNECT_MSG, 0x3637_3839u32.to_le_bytes(), "written in host (little-endian) order");
        assert_eq!(UDP_CONNECT_REPLY, 0x3938_3736u32.to_le_bytes());
    }
}
