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

use serde_json::{json, Map, Value};

/// iperf3's default port (`iperf3 -s`), used by `--iperf3` modes.
pub const IPERF3_PORT: u16 = 5201;
/// The cookie: 36 characters of `a-z2-7` and a NUL.
pub const COOKIE_LEN: usize = 37;
/// Longest parameter document a server accepts (iperf3 refuses longer ones too).
pub const MAX_PARAMS_LEN: u32 = 8 * 1024;
/// Longest results document we read: a stream's entry is under 300 bytes, and a test has at
/// most [`MAX_STREAMS`] each way; server output text is never asked for.
pub const MAX_RESULTS_LEN: u32 = 256 * 1024;
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

/// The data protocol a test asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataProto {
    Tcp,
    Udp,
}

/// The client's parameters (the first JSON document, client to server). Keys we do not
/// know are ignored, as iperf3 does.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub proto: DataProto,
    /// Seconds omitted from the start (`-O`).
    pub omit: u64,
    /// Test length in seconds (`-t`); 0 with `num` or `blockcount`.
    pub time: u64,
    /// Bytes to send (`-n`) and blocks to send (`-k`); 0 when the test is timed.
    pub bytes: u64,
    pub blocks: u64,
    pub parallel: u32,
    pub reverse: bool,
    pub bidirectional: bool,
    /// Bytes per write (`-l`).
    pub len: u32,
    /// Bits per second per stream (`-b`); 0 unlimited.
    pub rate_bps: u64,
    /// Bits per second per stream for the fq pacing (`--fq-rate`).
    pub fq_rate_bps: u64,
    /// Socket buffer size (`-w`).
    pub window: u32,
    /// `-M`.
    pub mss: u32,
    /// `-S`.
    pub tos: u8,
    /// `-C`.
    pub congestion: Option<String>,
    pub nodelay: bool,
    /// UDP sequence numbers are 64-bit (`--udp-counters-64bit`).
    pub udp_counters_64bit: bool,
    /// Options whose effect we cannot give (a server that meets them refuses the test):
    /// their keys, e.g. `authtoken`, `sctp`, `get_server_output`.
    pub unsupported: Vec<&'static str>,
    pub client_version: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            proto: DataProto::Tcp,
            omit: 0,
            time: 10,
            bytes: 0,
            blocks: 0,
            parallel: 1,
            reverse: false,
            bidirectional: false,
            len: 128 * 1024,
            rate_bps: 0,
            fq_rate_bps: 0,
            window: 0,
            mss: 0,
            tos: 0,
            congestion: None,
            nodelay: false,
            udp_counters_64bit: false,
            unsupported: Vec::new(),
            client_version: None,
        }
    }
}

/// Keys a client may send whose options change what the test does in a way we do not
/// implement (they are refused on `recv --iperf3`, never sent by `send --iperf3`).
const UNSUPPORTED_KEYS: [&str; 7] =
    ["sctp", "authtoken", "get_server_output", "server_affinity", "burst", "mptcp", "dont_fragment"];

impl Params {
    /// The document as `send --iperf3` writes it.
    pub fn to_json(&self) -> Value {
        let mut j = Map::new();
        j.insert(if self.proto == DataProto::Udp { "udp" } else { "tcp" }.into(), json!(true));
        for (key, value) in [
            ("omit", self.omit),
            ("time", self.time),
            ("num", self.bytes),
            ("blockcount", self.blocks),
            ("parallel", u64::from(self.parallel)),
        ] {
            j.insert(key.into(), json!(value));
        }
        for (key, value) in [
            ("len", u64::from(self.len)),
            ("bandwidth", self.rate_bps),
            ("fqrate", self.fq_rate_bps),
            ("window", u64::from(self.window)),
            ("MSS", u64::from(self.mss)),
            ("TOS", u64::from(self.tos)),
        ] {
            if value != 0 {
                j.insert(key.into(), json!(value));
            }
        }
        for (key, on) in [("reverse", self.reverse), ("bidirectional", self.bidirectional), ("nodelay", self.nodelay)] {
            if on {
                j.insert(key.into(), json!(true));
            }
        }
        if self.udp_counters_64bit {
            j.insert("udp_counters_64bit".into(), json!(1));
        }
        if let Some(cc) = &self.congestion {
            j.insert("congestion".into(), json!(cc));
        }
        if let Some(v) = &self.client_version {
            j.insert("client_version".into(), json!(v));
        }
        Value::Object(j)
    }

    /// Reads a client's parameters, within iperf3's own limits.
    pub fn parse(text: &[u8]) -> Result<Params, String> {
        let doc: Value = serde_json::from_slice(text).map_err(|e| format!("parameters are not JSON: {e}"))?;
        let j = doc.as_object().ok_or("parameters are not a JSON object")?;
        let flag = |key: &str| j.get(key).is_some_and(|v| v == &Value::Bool(true));
        let num = |key: &str, max: u64| -> Result<u64, String> {
            match j.get(key) {
                None => Ok(0),
                Some(v) => {
                    whole(v).filter(|n| *n <= max).ok_or_else(|| format!("parameter '{key}' is {v}: not 0..={max}"))
                }
            }
        };
        let proto = match (flag("tcp"), flag("udp")) {
            (true, false) => DataProto::Tcp,
            (false, true) => DataProto::Udp,
            _ if flag("sctp") => return Err("SCTP tests are not served (TCP and UDP only)".into()),
            _ => return Err("parameters name no protocol (\"tcp\": true or \"udp\": true)".into()),
        };
        let (min_len, max_len) = match proto {
            DataProto::Tcp => (1, MAX_TCP_BLOCK),
            DataProto::Udp => (MIN_UDP_BLOCK, MAX_UDP_BLOCK),
        };
        let len = match j.get("len") {
            None => Params::default().len.min(max_len),
            Some(_) => num("len", u64::from(max_len))? as u32,
        };
        if len < min_len {
            return Err(format!("parameter 'len' is {len}: at least {min_len}"));
        }
        let parallel = num("parallel", u64::from(MAX_STREAMS))? as u32;
        let congestion = match j.get("congestion") {
            None => None,
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_graphic()) => {
                Some(s.clone())
            }
            Some(v) => return Err(format!("parameter 'congestion' is {v}: not an algorithm name")),
        };
        let client_version = match j.get("client_version") {
            Some(Value::String(s)) if s.len() <= 32 => Some(s.chars().filter(|c| !c.is_control()).collect()),
            _ => None,
        };
        Ok(Params {
            proto,
            omit: num("omit", MAX_OMIT)?,
            time: num("time", MAX_TIME)?,
            bytes: num("num", 1 << 52)?,
            blocks: num("blockcount", 1 << 52)?,
            parallel: parallel.max(1),
            reverse: flag("reverse"),
            bidirectional: flag("bidirectional"),
            len,
            rate_bps: num("bandwidth", 1 << 52)?,
            fq_rate_bps: num("fqrate", 1 << 52)?,
            window: num("window", 512 << 20)? as u32,
            mss: num("MSS", 32 * 1024 - 1)? as u32,
            tos: num("TOS", 255)? as u8,
            congestion,
            nodelay: flag("nodelay"),
            udp_counters_64bit: j.get("udp_counters_64bit").and_then(whole).is_some_and(|n| n != 0),
            unsupported: UNSUPPORTED_KEYS
                .into_iter()
                .filter(|k| j.get(*k).is_some_and(|v| v != &Value::Bool(false) && v != &json!(0)))
                .collect(),
            client_version,
        })
    }

    /// Streams each way: `parallel`, both ways with `bidirectional`.
    pub fn connections(&self) -> u32 {
        self.parallel * if self.bidirectional { 2 } else { 1 }
    }
}

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
/// makes (iperf3 prints its own text for each; ours logs the exact reason).
pub mod error_code {
    /// Test too long.
    pub const DURATION: i32 = 5;
    /// Too many parallel streams.
    pub const NUM_STREAMS: i32 = 6;
    /// Cannot receive the parameters (what we answer to parameters we refuse).
    pub const RECV_PARAMS: i32 = 114;
    /// A protocol (or mode) the server does not run.
    pub const PROTOCOL: i32 = 131;
    /// Test authorization failed.
    pub const AUTH: i32 = 142;
}

/// iperf3's meaning of an error number a server sent (the ones a client can cause; others
/// by number).
pub fn server_error_text(code: i32) -> String {
    let known = match code {
        error_code::DURATION => "test too long",
        error_code::NUM_STREAMS => "too many parallel streams",
        7 => "block size too large",
        12 => "bad omit value",
        20 => "bad UDP block size",
        21 => "bad TOS value",
        27 => "total rate over the server's limit",
        error_code::RECV_PARAMS => "parameters not accepted",
        117 => "results not received",
        121 => "server busy",
        error_code::PROTOCOL => "protocol not served",
        error_code::AUTH => "authorization failed",
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

    /// `iperf3 -c 127.0.0.1 -t 1 -P 2` (3.12), its parameters as sent (`-d` prints them).
    const CLIENT_PARAMS_3_12: &str = r#"{"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":2,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#;
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
    fn real_client_params_parse() {
        let p = Params::parse(CLIENT_PARAMS_3_12.as_bytes()).unwrap();
        assert_eq!((p.proto, p.time, p.parallel, p.len, p.omit), (DataProto::Tcp, 1, 2, 131072, 0));
        assert!(p.unsupported.is_empty() && !p.reverse && !p.bidirectional);
        assert_eq!(p.client_version.as_deref(), Some("3.12"));
        assert_eq!(p.connections(), 2);
    }

    #[test]
    fn our_params_round_trip() {
        let p = Params {
            proto: DataProto::Udp,
            omit: 2,
            time: 5,
            parallel: 8,
            bidirectional: true,
            len: 1400,
            rate_bps: 1_000_000,
            tos: 0x10,
            congestion: Some("cubic".into()),
            udp_counters_64bit: true,
            client_version: Some("uringbench".into()),
            ..Params::default()
        };
        let text = p.to_json().to_string();
        assert_eq!(Params::parse(text.as_bytes()).unwrap(), p);
        assert_eq!(p.connections(), 16);
    }

    #[test]
    fn bad_params_are_refused_with_a_reason() {
        let refused = |text: &str| Params::parse(text.as_bytes()).unwrap_err();
        assert!(refused("[1]").contains("not a JSON object"));
        assert!(refused("{").contains("not JSON"));
        assert!(refused(r#"{"time":1}"#).contains("no protocol"));
        assert!(refused(r#"{"sctp":true}"#).contains("SCTP"));
        assert!(refused(r#"{"tcp":true,"udp":true}"#).contains("no protocol"));
        assert!(refused(r#"{"tcp":true,"time":-1}"#).contains("'time'"));
        assert!(refused(r#"{"tcp":true,"time":1.5}"#).contains("'time'"));
        assert!(refused(r#"{"tcp":true,"time":100000}"#).contains("'time'"));
        assert!(refused(r#"{"tcp":true,"parallel":129}"#).contains("'parallel'"));
        assert!(refused(r#"{"udp":true,"len":8}"#).contains("'len'"));
        assert!(refused(r#"{"tcp":true,"len":2000000}"#).contains("'len'"));
        assert!(refused(r#"{"tcp":true,"congestion":"a b"}"#).contains("congestion"));
        let p = Params::parse(br#"{"tcp":true,"authtoken":"x","get_server_output":1,"burst":0}"#).unwrap();
        assert_eq!(p.unsupported, vec!["authtoken", "get_server_output"]);
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
