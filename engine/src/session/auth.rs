//! `--psk-file`: a mutual challenge-response between `send` and `recv` before any test is
//! described, and the per-session key that admits the test's data flows.
//!
//! Both ends hold the same secret (the file's contents). The sender sends a fresh nonce; the
//! receiver answers with its own nonce and an HMAC-SHA256 over both nonces and the protocol
//! version under a receiver label; the sender checks it and answers with the same HMAC under
//! a sender label. Neither proof can be replayed (the other side's nonce is fresh) nor
//! reflected (the labels differ). Both ends then derive the session key, an HMAC of both
//! nonces under a third label, and every TCP data flow presents a tag (HMAC of the cookie
//! and its index under that key), so a cookie seen on the wire admits nothing without the
//! secret. The exchange authenticates the ends; it does not encrypt or protect the test's
//! traffic afterwards (docs/protocol.md says what that leaves open).

use crate::base::error::{Error, Result};
use crate::session::control::{self, ControlMsg, SessionCookie, CONTROL_MAGIC, PROTOCOL_VERSION};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Length of each side's nonce and of each proof.
pub(crate) const NONCE_LEN: usize = 32;
pub(crate) type Nonce = [u8; NONCE_LEN];
pub(crate) type Proof = [u8; 32];
/// Length of a data flow's tag (a truncated HMAC-SHA256: 128 bits cannot be guessed).
pub(crate) const TAG_LEN: usize = 16;
pub(crate) type FlowTag = [u8; TAG_LEN];
/// The shortest secret accepted: 16 bytes (128 bits, if random).
pub(crate) const MIN_PSK_LEN: usize = 16;

const RECEIVER_LABEL: &[u8] = b"uringbench receiver proof";
const SENDER_LABEL: &[u8] = b"uringbench sender proof";
const SESSION_LABEL: &[u8] = b"uringbench session key";
const FLOW_LABEL: &[u8] = b"uringbench data flow";
const BOUND_FLOW_LABEL: &[u8] = b"uringbench bound data flow";

/// A data flow's two ends as both hosts see them when no NAT is between them: the sender's
/// address and port, the receiver's. A bound flow's tag covers them, so a greeting seen on
/// the wire proves nothing on a connection from anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowEnds {
    pub sender: SocketAddr,
    pub receiver: SocketAddr,
}

impl FlowEnds {
    /// The ends of `stream`, a connection from a sender (`sender_side`) or accepted from one.
    pub(crate) fn of(stream: &TcpStream, sender_side: bool) -> std::io::Result<Self> {
        let (local, peer) = (stream.local_addr()?, stream.peer_addr()?);
        let (sender, receiver) = if sender_side { (local, peer) } else { (peer, local) };
        Ok(Self { sender, receiver })
    }

    /// Each end as 16 address bytes (IPv4 as v4-mapped IPv6: a dual-stack receiver sees it
    /// so) and 2 port bytes, big-endian; the sender's first.
    fn bytes(&self) -> [u8; 36] {
        let mut out = [0u8; 36];
        for (i, end) in [self.sender, self.receiver].iter().enumerate() {
            let ip = match end.ip().to_canonical() {
                std::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
                std::net::IpAddr::V6(a) => a,
            };
            out[i * 18..i * 18 + 16].copy_from_slice(&ip.octets());
            out[i * 18 + 16..i * 18 + 18].copy_from_slice(&end.port().to_be_bytes());
        }
        out
    }
}

/// The pre-shared secret of `--psk-file`.
#[derive(Clone)]
pub struct Psk(Vec<u8>);

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Psk({} bytes)", self.0.len())
    }
}

impl Psk {
    /// Reads the secret: the file's contents without surrounding whitespace (so `openssl
    /// rand -hex 32 > FILE` works as it is), at least [`MIN_PSK_LEN`] bytes.
    pub fn load(path: &Path) -> Result<Self> {
        let raw = std::fs::read(path)
            .map_err(|e| Error::usage(format!("--psk-file {}: cannot read it: {e}", path.display())))?;
        let text = raw.trim_ascii();
        if text.len() < MIN_PSK_LEN {
            return Err(Error::usage(format!(
                "--psk-file {}: {} bytes of secret, at least {MIN_PSK_LEN} needed (e.g. openssl rand -hex 32 > FILE)",
                path.display(),
                text.len()
            )));
        }
        Ok(Self(text.to_vec()))
    }

    /// A secret from bytes (tests).
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }

    fn mac(&self, label: &[u8], client: &Nonce, server: &Nonce) -> [u8; 32] {
        mac(&self.0, &[label, &PROTOCOL_VERSION.to_be_bytes(), client, server])
    }

    /// The receiver's proof that it holds the secret.
    pub(crate) fn receiver_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        self.mac(RECEIVER_LABEL, client, server)
    }

    /// The sender's proof that it holds the secret.
    pub(crate) fn sender_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        self.mac(SENDER_LABEL, client, server)
    }

    /// The key of the session both proofs opened.
    pub(crate) fn session_key(&self, client: &Nonce, server: &Nonce) -> SessionKey {
        SessionKey(self.mac(SESSION_LABEL, client, server))
    }
}

/// The key one authenticated session's data flows prove they belong to it with.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    /// The tag data flow `flow` of the session with `cookie` presents.
    pub(crate) fn flow_tag(&self, cookie: &SessionCookie, flow: u32) -> FlowTag {
        let full = mac(&self.0, &[FLOW_LABEL, cookie, &flow.to_be_bytes()]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Whether `tag` is flow `flow`'s, in constant time.
    pub(crate) fn verify_flow(&self, cookie: &SessionCookie, flow: u32, tag: &[u8]) -> bool {
        same(&self.flow_tag(cookie, flow), tag)
    }

    /// The tag data flow `flow` presents on the connection between `ends` (`UBD3`).
    pub(crate) fn bound_flow_tag(&self, cookie: &SessionCookie, flow: u32, ends: &FlowEnds) -> FlowTag {
        let full = mac(&self.0, &[BOUND_FLOW_LABEL, cookie, &flow.to_be_bytes(), &ends.bytes()]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Whether `tag` is flow `flow`'s on the connection between `ends`, in constant time.
    pub(crate) fn verify_bound_flow(&self, cookie: &SessionCookie, flow: u32, ends: &FlowEnds, tag: &[u8]) -> bool {
        same(&self.bound_flow_tag(cookie, flow, ends), tag)
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes a key of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Constant-time equality (a length mismatch is simply unequal).
pub fn same(expected: &[u8], got: &[u8]) -> bool {
    expected.len() == got.len() && bool::from(expected.ct_eq(got))
}

/// A fresh random nonce.
pub fn nonce() -> Result<Nonce> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n)
        .map_err(|e| Error::io("reading random bytes for a nonce", std::io::Error::other(e.to_string())))?;
    Ok(n)
}

/// The greeting of a data flow: an authenticated session's flows use `UBD2` and append their
/// tag; others keep version 2's `UBD1` greeting.
/// With `bound` (the receiver's accept asked for it), the tag covers the flow's ends (`UBD3`).
pub(crate) fn data_hello(
    key: Option<&SessionKey>,
    cookie: &SessionCookie,
    flow: u32,
    bound: Option<&FlowEnds>,
) -> Vec<u8> {
    let mut hello = control::data_hello(cookie, flow).to_vec();
    match (key, bound) {
        (Some(key), Some(ends)) => {
            hello[..4].copy_from_slice(&control::DATA_BOUND_MAGIC);
            hello.extend_from_slice(&key.bound_flow_tag(cookie, flow, ends));
        }
        (Some(key), None) => {
            hello[..4].copy_from_slice(&control::DATA_AUTH_MAGIC);
            hello.extend_from_slice(&key.flow_tag(cookie, flow));
        }
        (None, _) => {}
    }
    hello
}

/// The sender's side: opens the control session (`UBC1`), and with a secret runs the
/// challenge-response. Returns the session key (None without a secret). A receiver that
/// cannot prove it holds the secret is an error: the sender never sends it a test.
pub(crate) fn open_session(
    ctl: &mut TcpStream,
    psk: Option<&Psk>,
    peer: &str,
    timeout: Duration,
) -> Result<Option<SessionKey>> {
    ctl.write_all(&CONTROL_MAGIC).map_err(|e| Error::peer(format!("control channel to {peer}: {e}")))?;
    let Some(psk) = psk else { return Ok(None) };
    let client = nonce()?;
    control::write_msg(ctl, &ControlMsg::Auth { version: PROTOCOL_VERSION, nonce: client })?;
    crate::session::first_answer::check(ctl, peer)?;
    let (server, proof) = match control::read_reply(ctl, timeout)? {
        ControlMsg::Challenge { nonce, proof } => (nonce, proof),
        ControlMsg::Refuse { reason } => {
            return Err(Error::peer(format!("receiver {peer} refused the session: {reason}")))
        }
        other => {
            return Err(Error::protocol(format!(
                "receiver {peer} answered {} to --psk-file's challenge (a uringbench recv older than protocol version {PROTOCOL_VERSION}?)",
                other.kind()
            )))
        }
    };
    if !same(&psk.receiver_proof(&client, &server), &proof) {
        return Err(Error::peer(format!(
            "receiver {peer} could not prove it holds the key in --psk-file (another key, or not the receiver you meant)"
        )));
    }
    control::write_msg(ctl, &ControlMsg::Proof { proof: psk.sender_proof(&client, &server) })?;
    Ok(Some(psk.session_key(&client, &server)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_both_nonces_and_differ_by_side() {
        let psk = Psk::from_bytes(b"0123456789abcdef0123");
        let (c, s) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(c, s, "nonces are fresh");
        assert_eq!(psk.receiver_proof(&c, &s), psk.receiver_proof(&c, &s));
        assert_ne!(psk.receiver_proof(&c, &s), psk.sender_proof(&c, &s), "a proof cannot be reflected");
        assert_ne!(psk.receiver_proof(&c, &s), psk.receiver_proof(&s, &c), "the nonces' order counts");
        let other = Psk::from_bytes(b"0123456789abcdef0124");
        assert_ne!(psk.sender_proof(&c, &s), other.sender_proof(&c, &s), "another key, another proof");
        let key = psk.session_key(&c, &s);
        let cookie = [7u8; 16];
        let tag = key.flow_tag(&cookie, 3);
        assert!(key.verify_flow(&cookie, 3, &tag));
        assert!(!key.verify_flow(&cookie, 4, &tag), "a tag belongs to one flow index");
        assert!(!other.session_key(&c, &s).verify_flow(&cookie, 3, &tag), "and to one key");
        assert!(!key.verify_flow(&cookie, 3, &tag[..8]), "a short tag is unequal");
        let hello = data_hello(Some(&key), &cookie, 3, None);
        assert_eq!(&hello[..4], b"UBD2");
        assert_eq!(hello.len(), control::DATA_HELLO_LEN + TAG_LEN);
        assert_eq!(
            &data_hello(None, &cookie, 3, None)[..4],
            b"UBD1",
            "unauthenticated flows keep version 2's greeting"
        );
    }

    #[test]
    fn a_bound_tag_holds_on_its_own_connection_only() {
        let psk = Psk::from_bytes(b"0123456789abcdef0123");
        let key = psk.session_key(&[1; 32], &[2; 32]);
        let cookie = [7u8; 16];
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let ends = FlowEnds { sender: at("10.0.0.1:40000"), receiver: at("10.0.0.2:5300") };
        let hello = data_hello(Some(&key), &cookie, 3, Some(&ends));
        assert_eq!(&hello[..4], b"UBD3");
        let tag = &hello[control::DATA_HELLO_LEN..];
        assert!(key.verify_bound_flow(&cookie, 3, &ends, tag));
        // The receiver sees an IPv4 sender as v4-mapped on a dual-stack socket: the same ends.
        let mapped = FlowEnds { sender: at("[::ffff:10.0.0.1]:40000"), receiver: at("[::ffff:10.0.0.2]:5300") };
        assert!(key.verify_bound_flow(&cookie, 3, &mapped, tag));
        for (what, other) in [
            ("another source address", FlowEnds { sender: at("10.0.0.9:40000"), ..ends }),
            ("another source port", FlowEnds { sender: at("10.0.0.1:40001"), ..ends }),
            ("another receiver end", FlowEnds { receiver: at("10.0.0.2:5301"), ..ends }),
        ] {
            assert!(!key.verify_bound_flow(&cookie, 3, &other, tag), "{what}: the tag is refused");
        }
        assert!(!key.verify_flow(&cookie, 3, tag), "a bound tag is not an unbound one");
    }

    #[test]
    fn a_short_or_missing_secret_is_a_usage_error() {
        let dir = std::env::temp_dir().join(format!("ub-psk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let short = dir.join("short");
        std::fs::write(&short, "tooshort\n").unwrap();
        let e = Psk::load(&short).unwrap_err();
        assert!(e.message.contains("at least 16"), "{e}");
        let good = dir.join("good");
        std::fs::write(&good, "  0123456789abcdef0123456789abcdef\n").unwrap();
        assert_eq!(Psk::load(&good).unwrap().0, b"0123456789abcdef0123456789abcdef", "whitespace trimmed");
        assert!(Psk::load(&dir.join("absent")).unwrap_err().message.contains("cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
