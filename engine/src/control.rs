//! The control channel between `send` and `recv` (DESIGN §4).
//!
//! Every connection to the receiver's port starts with a 4-byte magic that says what it is:
//! `UBC1` a control session, `UBD1` a data flow. Control messages are frames of a 4-byte
//! big-endian length followed by that many bytes of JSON, at most [`MAX_FRAME`] bytes, so a
//! peer can never make us allocate more. A data flow sends its 16-byte session cookie and its
//! flow index once, then only payload.

use crate::error::{Error, Result};
use crate::report::SideReport;
use crate::spec::TestSpec;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Version of the control protocol; a receiver refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default port of `recv`: distinct from iperf2's 5001 and iperf3's 5201.
pub const DEFAULT_PORT: u16 = 5300;
pub const CONTROL_MAGIC: [u8; 4] = *b"UBC1";
pub const DATA_MAGIC: [u8; 4] = *b"UBD1";
/// Largest control frame accepted, in bytes.
pub const MAX_FRAME: usize = 64 * 1024;
/// Length of a data flow's greeting: magic, cookie, flow index.
pub const DATA_HELLO_LEN: usize = 4 + 16 + 4;

/// Identifies one test on the receiver; data flows present it to join their session.
pub type SessionCookie = [u8; 16];

/// Messages of the control channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    /// Sender → receiver: the test it wants. For UDP, `udp_ports` holds the source port of
    /// each flow's socket, so the receiver can give every flow a socket of its own on the
    /// control port (one firewall hole for everything).
    Hello {
        version: u32,
        spec: TestSpec,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        udp_ports: Vec<u16>,
    },
    /// Receiver → sender: accepted; open the data flows with this cookie. A connection-rate
    /// test (`crr`) connects to `data_port` instead: a listener private to the test, because
    /// every transaction is a new connection.
    Accept {
        cookie: SessionCookie,
        placement: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_port: Option<u16>,
        /// The receiver variant (`TestSpec::variant`) now applied, echoed so that a sender
        /// can tell a receiver that applied it from one too old to know the field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
    },
    /// Receiver → sender: refused, with the reason (a limit, a version mismatch...).
    Refuse { reason: String },
    /// Receiver → sender: every flow is connected and armed; the test starts now.
    Ready,
    /// Receiver → sender: the receiver's own measurements at the end: what it received
    /// (forward flows) and what it sent (reverse flows, with `--reverse`/`--bidir`).
    Result {
        report: Option<Box<SideReport>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reverse: Option<Box<SideReport>>,
    },
    /// Sender → receiver, for tests whose flows have no end of their own (UDP and
    /// connection-rate request/response): the sender's flows are done, stop and report.
    Finished,
    /// Either way: the test is abandoned.
    Abort { reason: String },
}

/// Writes one frame.
pub fn write_msg(stream: &mut TcpStream, msg: &ControlMsg) -> Result<()> {
    let body = serde_json::to_vec(msg).map_err(|e| Error::protocol(format!("encoding control message: {e}")))?;
    if body.len() > MAX_FRAME {
        return Err(Error::protocol(format!(
            "control message of {} bytes exceeds the {MAX_FRAME}-byte limit",
            body.len()
        )));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).map_err(|e| Error::peer(format!("control channel write failed: {e}")))
}

/// Reads one frame, waiting at most `timeout`.
pub fn read_msg(stream: &mut TcpStream, timeout: Duration) -> Result<ControlMsg> {
    stream.set_read_timeout(Some(timeout)).map_err(|e| Error::io("setting control timeout", e))?;
    let mut len = [0u8; 4];
    read_exact(stream, &mut len, timeout)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(Error::protocol(format!("control frame of {len} bytes exceeds the {MAX_FRAME}-byte limit")));
    }
    let mut body = vec![0u8; len];
    read_exact(stream, &mut body, timeout)?;
    serde_json::from_slice(&body).map_err(|e| Error::protocol(format!("malformed control message: {e}")))
}

/// `read_exact` with errors that say what happened to the peer.
pub fn read_exact(stream: &mut TcpStream, buf: &mut [u8], timeout: Duration) -> Result<()> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::peer("peer closed the control connection"),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Error::peer(format!("peer sent nothing for {:.1} s", timeout.as_secs_f64()))
        }
        _ => Error::peer(format!("control connection failed: {e}")),
    })
}

/// The greeting a data flow sends before any payload.
pub fn data_hello(cookie: &SessionCookie, flow: u32) -> [u8; DATA_HELLO_LEN] {
    let mut hello = [0u8; DATA_HELLO_LEN];
    hello[..4].copy_from_slice(&DATA_MAGIC);
    hello[4..20].copy_from_slice(cookie);
    hello[20..].copy_from_slice(&flow.to_be_bytes());
    hello
}

/// Splits the part of a data greeting after the magic into cookie and flow index.
pub fn parse_data_hello(rest: &[u8; DATA_HELLO_LEN - 4]) -> (SessionCookie, u32) {
    let mut cookie = [0u8; 16];
    cookie.copy_from_slice(&rest[..16]);
    (cookie, u32::from_be_bytes([rest[16], rest[17], rest[18], rest[19]]))
}

/// A fresh random session cookie.
pub fn new_cookie() -> SessionCookie {
    let mut cookie = [0u8; 16];
    // SAFETY: getrandom writes at most cookie.len() bytes into our buffer.
    let n = unsafe { libc::getrandom(cookie.as_mut_ptr().cast(), cookie.len(), 0) };
    if n != cookie.len() as isize {
        // getrandom cannot fail for 16 bytes after boot; fall back to time and pid anyway.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        cookie[..8].copy_from_slice(&(t.as_nanos() as u64).to_le_bytes());
        cookie[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    cookie
}

/// Resolves `host` and connects to `port`, with errors that say what to do.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<std::net::SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::usage(format!("cannot resolve target '{host}': {e}")))?
        .collect();
    let addr = *addrs.first().ok_or_else(|| Error::usage(format!("target '{host}' has no address")))?;
    let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Error::peer(format!(
            "nothing listens on {addr} (connection refused): start `uringbench recv --port {port}` there"
        )),
        Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => Error::peer(format!("{addr} is unreachable: {e}")),
        _ if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
            Error::peer(format!("{addr} did not answer within {:.0} s (host down or filtered)", timeout.as_secs_f64()))
        }
        _ => Error::peer(format!("cannot connect to {addr}: {e}")),
    })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        (a, b)
    }

    #[test]
    fn frames_round_trip() {
        let (mut a, mut b) = pair();
        write_msg(
            &mut a,
            &ControlMsg::Hello { version: PROTOCOL_VERSION, spec: TestSpec::default(), udp_ports: vec![] },
        )
        .unwrap();
        match read_msg(&mut b, Duration::from_secs(2)).unwrap() {
            ControlMsg::Hello { version, spec, .. } => {
                assert_eq!(version, PROTOCOL_VERSION);
                assert_eq!(spec, TestSpec::default(), "the spec must survive the wire unchanged");
            }
            other => panic!("expected Hello, got {other:?}"),
        }
    }

    #[test]
    fn oversized_frame_is_refused_before_allocation() {
        let (mut a, mut b) = pair();
        a.write_all(&(u32::MAX).to_be_bytes()).unwrap();
        let err = read_msg(&mut b, Duration::from_secs(2)).unwrap_err();
        assert!(err.message.contains("exceeds"), "unexpected error: {err}");
    }

    #[test]
    fn garbage_json_is_a_protocol_error() {
        let (mut a, mut b) = pair();
        a.write_all(&5u32.to_be_bytes()).unwrap();
        a.write_all(b"{oops").unwrap();
        let err = read_msg(&mut b, Duration::from_secs(2)).unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Protocol, "{err}");
    }

    #[test]
    fn silent_peer_times_out() {
        let (_a, mut b) = pair();
        let err = read_msg(&mut b, Duration::from_millis(100)).unwrap_err();
        assert!(err.message.contains("sent nothing"), "{err}");
    }

    #[test]
    fn data_hello_round_trip() {
        let cookie = new_cookie();
        let hello = data_hello(&cookie, 7);
        assert_eq!(&hello[..4], b"UBD1");
        let rest: [u8; DATA_HELLO_LEN - 4] = hello[4..].try_into().unwrap();
        assert_eq!(parse_data_hello(&rest), (cookie, 7));
        assert_ne!(new_cookie(), cookie, "cookies must differ between sessions");
    }
}
