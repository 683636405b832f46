//! The client's parameters, the first JSON document of a test (client to server), and the
//! refusals a server answers them with: iperf3's own error numbers, so that the client prints
//! iperf3's own text for each (`iperf3: error - ...`), never "unable to receive parameters".

use super::{error_code, whole, MAX_OMIT, MAX_STREAMS, MAX_TCP_BLOCK, MAX_TIME, MAX_UDP_BLOCK, MIN_UDP_BLOCK};
use crate::base::units::MAX_BURST;
use serde_json::{json, Map, Value};
use std::fmt;

/// Longest `authtoken` read: base64 of an RSA block of up to 8192 bits is under 1400 bytes.
pub const MAX_AUTHTOKEN_LEN: usize = 2048;

/// The data protocol a test asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataProto {
    Tcp,
    Udp,
}

/// A test refused: iperf3's error number (the client prints iperf3's text for it) and our
/// reason, for our own log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: i32,
    pub reason: String,
    /// The errno sent after the number (0: none), which the client prints as the cause.
    pub errno: i32,
}

impl Refusal {
    pub fn new(code: i32, reason: impl Into<String>) -> Self {
        Refusal { code, reason: reason.into(), errno: 0 }
    }

    /// The refusal with `errno` as its cause, as iperf3's server sends a failed system call's.
    pub fn with_errno(self, errno: i32) -> Self {
        Refusal { errno, ..self }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The sizes a 3.21 client sends beside `gso` and `gro`, as it derives them from the datagram
/// length: the GSO segment (`gso_dg_size`, the datagram length with GSO on, else 0), the GSO
/// buffer (`gso_bf_size`: as many whole datagrams as fit in the largest UDP payload) and the
/// GRO buffer (`gro_bf_size`: the largest UDP payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsroSizes {
    pub gso_datagram: u32,
    pub gso_buffer: u32,
    pub gro_buffer: u32,
}

impl GsroSizes {
    pub fn for_len(len: u32, gso: bool) -> GsroSizes {
        let len = len.clamp(1, MAX_UDP_BLOCK);
        GsroSizes {
            gso_datagram: if gso { len } else { 0 },
            gso_buffer: if gso { MAX_UDP_BLOCK / len * len } else { MAX_UDP_BLOCK },
            gro_buffer: MAX_UDP_BLOCK,
        }
    }
}

/// The client's parameters. Keys we do not know are ignored, as iperf3 does; every key that
/// changes the test is read, so that a server can honour it or refuse it by name.
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
    /// `-b RATE/COUNT`: writes sent back to back at each pacing step; 0 without.
    pub burst: u32,
    /// Bits per second per stream for the fq pacing (`--fq-rate`).
    pub fq_rate_bps: u64,
    /// Socket buffer size (`-w`).
    pub window: u32,
    /// `-M`.
    pub mss: u32,
    /// `-S`.
    pub tos: u8,
    /// `-L`: the IPv6 flow label of the server's sending streams; 0 none.
    pub flowlabel: u32,
    /// `-C`.
    pub congestion: Option<String>,
    pub nodelay: bool,
    /// `-m/--mptcp`: the data connections are MPTCP.
    pub mptcp: bool,
    /// `--dont-fragment`: UDP datagrams go with IPv4's DF bit set.
    pub dont_fragment: bool,
    /// `--gsro` (iperf3 3.21): the UDP sender may use GSO, the receiver GRO (each 0 or 1 on
    /// the wire; a 3.21 client sends both keys, with [`GsroSizes`], with every UDP test).
    pub gso: bool,
    pub gro: bool,
    /// `-A n,m`: the CPU the client asks the server's test to run on.
    pub server_affinity: Option<u32>,
    /// `--get-server-output`: the server's own output goes back in its results.
    pub get_server_output: bool,
    /// UDP sequence numbers are 64-bit (`--udp-counters-64bit`).
    pub udp_counters_64bit: bool,
    /// `--username` with `--rsa-public-key-path`: the credentials, RSA-encrypted, base64.
    pub authtoken: Option<String>,
    /// `--sctp`: refused by every server here, kept so a document says what was asked.
    pub sctp: bool,
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
            burst: 0,
            fq_rate_bps: 0,
            window: 0,
            mss: 0,
            tos: 0,
            flowlabel: 0,
            congestion: None,
            nodelay: false,
            mptcp: false,
            dont_fragment: false,
            gso: false,
            gro: false,
            server_affinity: None,
            get_server_output: false,
            udp_counters_64bit: false,
            authtoken: None,
            sctp: false,
            client_version: None,
        }
    }
}

impl Params {
    /// The document as `send --iperf3` writes it (keys as iperf3's client writes them).
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
            ("burst", u64::from(self.burst)),
            ("fqrate", self.fq_rate_bps),
            ("window", u64::from(self.window)),
            ("MSS", u64::from(self.mss)),
            ("TOS", u64::from(self.tos)),
            ("flowlabel", u64::from(self.flowlabel)),
        ] {
            if value != 0 {
                j.insert(key.into(), json!(value));
            }
        }
        for (key, on) in [
            ("reverse", self.reverse),
            ("bidirectional", self.bidirectional),
            ("nodelay", self.nodelay),
            ("mptcp", self.mptcp),
        ] {
            if on {
                j.insert(key.into(), json!(true));
            }
        }
        for (key, on) in [
            ("udp_counters_64bit", self.udp_counters_64bit),
            ("get_server_output", self.get_server_output),
            ("dont_fragment", self.dont_fragment),
        ] {
            if on {
                j.insert(key.into(), json!(1));
            }
        }
        if self.proto == DataProto::Udp && (self.gso || self.gro) {
            let sizes = GsroSizes::for_len(self.len, self.gso);
            j.insert("gso".into(), json!(u8::from(self.gso)));
            j.insert("gso_dg_size".into(), json!(sizes.gso_datagram));
            j.insert("gso_bf_size".into(), json!(sizes.gso_buffer));
            j.insert("gro".into(), json!(u8::from(self.gro)));
            j.insert("gro_bf_size".into(), json!(sizes.gro_buffer));
        }
        if let Some(cpu) = self.server_affinity {
            j.insert("server_affinity".into(), json!(cpu));
        }
        for (key, text) in
            [("congestion", &self.congestion), ("authtoken", &self.authtoken), ("client_version", &self.client_version)]
        {
            if let Some(text) = text {
                j.insert(key.into(), json!(text));
            }
        }
        Value::Object(j)
    }

    /// Reads a client's parameters within iperf3's own limits; a value out of them is refused
    /// with the error number iperf3's server gives it.
    pub fn parse(text: &[u8]) -> Result<Params, Refusal> {
        let recv_params = |why: String| Refusal::new(error_code::RECV_PARAMS, why);
        let doc: Value =
            serde_json::from_slice(text).map_err(|e| recv_params(format!("parameters are not JSON: {e}")))?;
        let j = doc.as_object().ok_or_else(|| recv_params("parameters are not a JSON object".into()))?;
        let flag = |key: &str| j.get(key).is_some_and(|v| v == &Value::Bool(true));
        // A number key: absent is 0; out of 0..=max is refused with `code`.
        let num = |key: &str, max: u64, code: i32| -> Result<u64, Refusal> {
            match j.get(key) {
                None => Ok(0),
                Some(v) => whole(v)
                    .filter(|n| *n <= max)
                    .ok_or_else(|| Refusal::new(code, format!("parameter '{key}' is {v}: not 0..={max}"))),
            }
        };
        // A switch iperf3 writes as a number (1 on, 0 or absent off).
        let on = |key: &str| j.get(key).and_then(whole).is_some_and(|n| n != 0);
        // 3.21's GSO/GRO switches: 0 or 1 (its server refuses a `gro` out of 0..=1, and
        // takes a `gso` over 1 as on; both are 0 or 1 here).
        let switch = |key: &str| -> Result<bool, Refusal> { num(key, 1, error_code::RECV_PARAMS).map(|n| n == 1) };
        // Their buffer sizes: read only to be bounded (our loops size their own buffers).
        for key in ["gso_dg_size", "gso_bf_size", "gro_bf_size"] {
            num(key, u64::from(MAX_UDP_BLOCK), error_code::RECV_PARAMS)?;
        }
        let text = |key: &str, max: usize| -> Result<Option<String>, Refusal> {
            match j.get(key) {
                None => Ok(None),
                Some(Value::String(s))
                    if !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic()) =>
                {
                    Ok(Some(s.clone()))
                }
                Some(v) => {
                    let shown: String = v.to_string().chars().take(40).collect();
                    Err(recv_params(format!("parameter '{key}' is {shown}: not a word of at most {max} characters")))
                }
            }
        };
        let proto = match (flag("tcp"), flag("udp")) {
            (true, false) => DataProto::Tcp,
            (false, true) => DataProto::Udp,
            _ if flag("sctp") => {
                return Err(Refusal::new(error_code::NO_SCTP, "SCTP tests are not served (TCP and UDP only)"))
            }
            _ => return Err(recv_params("parameters name no protocol (\"tcp\": true or \"udp\": true)".into())),
        };
        let (min_len, max_len, len_code) = match proto {
            DataProto::Tcp => (1, MAX_TCP_BLOCK, error_code::BLOCK_SIZE),
            DataProto::Udp => (MIN_UDP_BLOCK, MAX_UDP_BLOCK, error_code::UDP_BLOCK_SIZE),
        };
        let len = match j.get("len") {
            None => Params::default().len.min(max_len),
            Some(_) => num("len", u64::from(max_len), len_code)? as u32,
        };
        if len < min_len {
            return Err(Refusal::new(len_code, format!("parameter 'len' is {len}: at least {min_len}")));
        }
        let server_affinity = match j.get("server_affinity") {
            None => None,
            Some(_) => Some(num("server_affinity", 1024, error_code::AFFINITY)? as u32),
        };
        let client_version = match j.get("client_version") {
            Some(Value::String(s)) if s.len() <= 32 => Some(s.chars().filter(|c| !c.is_control()).collect()),
            _ => None,
        };
        Ok(Params {
            proto,
            omit: num("omit", MAX_OMIT, error_code::OMIT)?,
            time: num("time", MAX_TIME, error_code::DURATION)?,
            bytes: num("num", 1 << 52, error_code::RECV_PARAMS)?,
            blocks: num("blockcount", 1 << 52, error_code::RECV_PARAMS)?,
            parallel: (num("parallel", u64::from(MAX_STREAMS), error_code::NUM_STREAMS)? as u32).max(1),
            reverse: flag("reverse"),
            bidirectional: flag("bidirectional"),
            len,
            rate_bps: num("bandwidth", 1 << 52, error_code::RECV_PARAMS)?,
            burst: num("burst", u64::from(MAX_BURST), error_code::BURST)? as u32,
            fq_rate_bps: num("fqrate", 1 << 52, error_code::RECV_PARAMS)?,
            window: num("window", 512 << 20, error_code::BUF_SIZE)? as u32,
            mss: num("MSS", 32 * 1024 - 1, error_code::MSS)? as u32,
            tos: num("TOS", 255, error_code::BAD_TOS)? as u8,
            flowlabel: num("flowlabel", 0xf_ffff, error_code::FLOW_LABEL)? as u32,
            congestion: text("congestion", 16)?,
            nodelay: flag("nodelay"),
            mptcp: flag("mptcp"),
            dont_fragment: on("dont_fragment"),
            gso: switch("gso")?,
            gro: switch("gro")?,
            server_affinity,
            get_server_output: on("get_server_output"),
            udp_counters_64bit: on("udp_counters_64bit"),
            authtoken: text("authtoken", MAX_AUTHTOKEN_LEN)?,
            sctp: false,
            client_version,
        })
    }

    /// Streams each way: `parallel`, both ways with `bidirectional`.
    pub fn connections(&self) -> u32 {
        self.parallel * if self.bidirectional { 2 } else { 1 }
    }

    /// Whether the server sends on some stream (`-R`, `--bidir`).
    pub fn server_sends(&self) -> bool {
        self.reverse || self.bidirectional
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `iperf3 -c 127.0.0.1 -t 1 -P 2` (3.12), its parameters as sent (`-d` prints them).
    const CLIENT_PARAMS_3_12: &str = r#"{"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":2,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#;
    /// `iperf3 -c HOST -u -t 1 -b 100M/10 --dont-fragment --get-server-output --gsro` (3.21+,
    /// built from upstream source), its parameters as `-d` printed them: a 3.21 client sends
    /// the GSO/GRO keys with every UDP test.
    const CLIENT_PARAMS_3_21_UDP: &str = r#"{"udp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":1,"len":1448,"bandwidth":100000000,"pacing_timer":1000,"burst":10,"gso":1,"gso_dg_size":1448,"gso_bf_size":65160,"gro":1,"gro_bf_size":65507,"get_server_output":1,"dont_fragment":1,"client_version":"3.21+"}"#;

    /// The same without --gsro (and `-l 1448 -b 10M`): the keys are sent, switched off.
    const CLIENT_PARAMS_3_21_UDP_PLAIN: &str = r#"{"udp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":1,"len":1448,"bandwidth":10000000,"pacing_timer":1000,"gso":0,"gso_dg_size":0,"gso_bf_size":65507,"gro":0,"gro_bf_size":65507,"client_version":"3.21+"}"#;

    /// `iperf3 -c 127.0.0.1 -m -t 1` (3.21+, built from upstream source), its parameters as
    /// `-d` printed them: `-m` is the one key `"mptcp": true`; the data connections are
    /// then IPPROTO_MPTCP sockets, the control connection stays TCP.
    const CLIENT_PARAMS_3_21_MPTCP: &str = r#"{"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":1,"mptcp":true,"len":131072,"pacing_timer":1000,"client_version":"3.21+"}"#;

    #[test]
    fn a_3_21_mptcp_client_params_parse() {
        let p = Params::parse(CLIENT_PARAMS_3_21_MPTCP.as_bytes()).unwrap();
        assert!(p.mptcp, "{p:?}");
        assert_eq!((p.proto, p.time, p.parallel, p.connections()), (DataProto::Tcp, 1, 1, 1));
        assert_eq!(p.client_version.as_deref(), Some("3.21+"));
        // Our own -m says it the same way.
        assert_eq!(p.to_json()["mptcp"], Value::Bool(true));
        let plain = CLIENT_PARAMS_3_21_MPTCP.replace("\"mptcp\":true,", "");
        assert!(!Params::parse(plain.as_bytes()).unwrap().mptcp, "no key, no MPTCP");
    }

    #[test]
    fn real_client_params_parse() {
        let p = Params::parse(CLIENT_PARAMS_3_12.as_bytes()).unwrap();
        assert_eq!((p.proto, p.time, p.parallel, p.len, p.omit), (DataProto::Tcp, 1, 2, 131072, 0));
        assert!(!p.reverse && !p.bidirectional && !p.get_server_output && p.authtoken.is_none());
        assert_eq!(p.client_version.as_deref(), Some("3.12"));
        assert_eq!(p.connections(), 2);
        let p = Params::parse(CLIENT_PARAMS_3_21_UDP.as_bytes()).unwrap();
        assert_eq!((p.proto, p.len, p.rate_bps, p.burst), (DataProto::Udp, 1448, 100_000_000, 10));
        assert!(p.gso && p.gro && p.dont_fragment && p.get_server_output && !p.mptcp);
        let p = Params::parse(CLIENT_PARAMS_3_21_UDP_PLAIN.as_bytes()).unwrap();
        assert!(!p.gso && !p.gro, "0 is off: a 3.21 client sends both keys without --gsro");
    }

    /// `send --iperf3 -u --gsro` asks as a 3.21 client does: the same five keys with the same
    /// values for the same datagram length, so a 3.21 server sizes its buffers as for its own
    /// client; without --gsro none of them (as a client before 3.21).
    #[test]
    fn our_gsro_keys_are_the_3_21_clients() {
        let key_set = |text: &str| -> Vec<(String, Value)> {
            let doc: Value = serde_json::from_str(text).unwrap();
            let mut keys: Vec<_> = doc
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.starts_with("gso") || k.starts_with("gro"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            keys.sort_by(|a, b| a.0.cmp(&b.0));
            keys
        };
        let ours = Params { proto: DataProto::Udp, len: 1448, gso: true, gro: true, ..Params::default() };
        let theirs = key_set(CLIENT_PARAMS_3_21_UDP);
        assert_eq!(theirs.len(), 5, "{theirs:?}");
        assert_eq!(key_set(&ours.to_json().to_string()), theirs);
        assert_eq!(
            GsroSizes::for_len(1448, false),
            GsroSizes { gso_datagram: 0, gso_buffer: 65507, gro_buffer: 65507 }
        );
        let plain = Params { gso: false, gro: false, ..ours.clone() };
        assert!(key_set(&plain.to_json().to_string()).is_empty(), "no --gsro: no keys");
        let tcp = Params { proto: DataProto::Tcp, ..ours };
        assert!(key_set(&tcp.to_json().to_string()).is_empty(), "TCP: no keys, as iperf3 sends them with UDP only");
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
            burst: 10,
            tos: 0x10,
            congestion: Some("cubic".into()),
            udp_counters_64bit: true,
            dont_fragment: true,
            get_server_output: true,
            gso: true,
            server_affinity: Some(3),
            authtoken: Some("c2VjcmV0".into()),
            client_version: Some("uringbench".into()),
            ..Params::default()
        };
        let text = p.to_json().to_string();
        assert_eq!(Params::parse(text.as_bytes()).unwrap(), p);
        assert_eq!(p.connections(), 16);
        let m = Params { mptcp: true, flowlabel: 7, ..Params::default() };
        assert_eq!(Params::parse(m.to_json().to_string().as_bytes()).unwrap(), m);
    }

    #[test]
    fn bad_params_are_refused_with_iperf3_error_numbers() {
        let refused = |text: &str| Params::parse(text.as_bytes()).unwrap_err();
        let code = |text: &str| refused(text).code;
        assert!(refused("[1]").reason.contains("not a JSON object"));
        assert!(refused("{").reason.contains("not JSON"));
        assert_eq!(code("{"), error_code::RECV_PARAMS);
        assert!(refused(r#"{"time":1}"#).reason.contains("no protocol"));
        assert_eq!(code(r#"{"sctp":true}"#), error_code::NO_SCTP);
        assert!(refused(r#"{"tcp":true,"udp":true}"#).reason.contains("no protocol"));
        assert_eq!(code(r#"{"tcp":true,"time":-1}"#), error_code::DURATION);
        assert_eq!(code(r#"{"tcp":true,"time":1.5}"#), error_code::DURATION);
        assert!(refused(r#"{"tcp":true,"time":100000}"#).reason.contains("'time'"));
        assert_eq!(code(r#"{"tcp":true,"omit":601}"#), error_code::OMIT);
        assert_eq!(code(r#"{"tcp":true,"parallel":129}"#), error_code::NUM_STREAMS);
        assert_eq!(code(r#"{"udp":true,"len":8}"#), error_code::UDP_BLOCK_SIZE);
        assert_eq!(code(r#"{"tcp":true,"len":2000000}"#), error_code::BLOCK_SIZE);
        assert_eq!(code(r#"{"udp":true,"burst":1001}"#), error_code::BURST);
        assert_eq!(code(r#"{"tcp":true,"TOS":256}"#), error_code::BAD_TOS);
        assert_eq!(code(r#"{"tcp":true,"MSS":70000}"#), error_code::MSS);
        assert_eq!(code(r#"{"tcp":true,"window":1e12}"#), error_code::BUF_SIZE);
        assert_eq!(code(r#"{"tcp":true,"server_affinity":-1}"#), error_code::AFFINITY);
        assert_eq!(code(r#"{"tcp":true,"flowlabel":1048576}"#), error_code::FLOW_LABEL);
        assert!(refused(r#"{"tcp":true,"congestion":"a b"}"#).reason.contains("congestion"));
        assert_eq!(code(r#"{"udp":true,"gro":2}"#), error_code::RECV_PARAMS, "3.21 refuses a gro out of 0..=1");
        assert!(refused(r#"{"udp":true,"gso":-1}"#).reason.contains("'gso'"));
        assert!(refused(r#"{"udp":true,"gso":1,"gso_bf_size":1e9}"#).reason.contains("'gso_bf_size'"));
        assert!(refused(r#"{"udp":true,"gro_bf_size":65508}"#).reason.contains("'gro_bf_size'"));
        let long = format!(r#"{{"tcp":true,"authtoken":"{}"}}"#, "A".repeat(MAX_AUTHTOKEN_LEN + 1));
        assert!(refused(&long).reason.contains("'authtoken'"));
        let p = Params::parse(br#"{"tcp":true,"authtoken":"x","get_server_output":1,"burst":0,"mptcp":true}"#).unwrap();
        assert_eq!((p.authtoken.as_deref(), p.get_server_output, p.burst, p.mptcp), (Some("x"), true, 0, true));
    }
}
