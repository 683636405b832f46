//! Names the service on the port when the first answer to our greeting is not uringbench's:
//! an HTTP or SSH server (their first line), iperf3's server (it takes the first 37 bytes
//! for its cookie and answers one state byte), or iperf2's (it resets a connection whose
//! header it cannot read). Judged within [`QUICK`] of the greeting, before the reply is read
//! as a frame (nginx's `HTTP` would read as a 1.2 GB length).

use crate::base::error::{Error, Result};
use crate::session::control::{self, MAX_FRAME, MORE};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long the first answer is watched for a foreign protocol. A uringbench recv that takes
/// longer is not judged: its reply is then read as usual.
pub(crate) const QUICK: Duration = Duration::from_secs(1);

/// iperf3's control states it may send first: PARAM_EXCHANGE, ACCESS_DENIED, SERVER_ERROR.
const IPERF3_STATES: [u8; 3] = [9, 0xff, 0xfe];

/// What the first bytes of the port's answer say.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Could be a uringbench frame: read it as one.
    Ours,
    /// Too few bytes to tell yet.
    More,
    /// Another service, named.
    Foreign(String),
}

fn judge(bytes: &[u8], settled: bool) -> Verdict {
    let first_line = || {
        let line = bytes.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
        crate::base::text::escape_controls(&String::from_utf8_lossy(&line[..line.len().min(60)]))
    };
    if bytes.starts_with(b"HTTP/") {
        return Verdict::Foreign(format!("an HTTP server answers there (\"{}\")", first_line()));
    }
    if bytes.starts_with(b"SSH-") {
        return Verdict::Foreign(format!("an SSH server answers there (\"{}\")", first_line()));
    }
    if bytes.len() < 4 {
        if !settled {
            return Verdict::More;
        }
        if bytes.len() == 1 && IPERF3_STATES.contains(&bytes[0]) {
            return Verdict::Foreign(
                "iperf3's server answers there (it took our greeting for its 37-byte cookie and sent a state byte): \
                 to test against iperf3 -s use send --iperf3"
                    .into(),
            );
        }
        return Verdict::Foreign(format!("something answers there with {} byte(s) {:02x?}", bytes.len(), bytes));
    }
    let word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if (word & !MORE) as usize > MAX_FRAME {
        let text = bytes.iter().take(16).all(|b| b.is_ascii_graphic() || *b == b' ');
        return Verdict::Foreign(if text {
            format!("a service that is not uringbench answers there (\"{}\")", first_line())
        } else {
            format!(
                "a service that is not uringbench answers there (first bytes {:02x?})",
                &bytes[..bytes.len().min(8)]
            )
        });
    }
    Verdict::Ours
}

/// Watches the first answer on the control channel for up to [`QUICK`]; an error names the
/// service that answered instead of a uringbench recv.
pub(crate) fn check(ctl: &TcpStream, peer: &str) -> Result<()> {
    let not_ours = |what: String| Error::peer(format!("{peer} is not a uringbench recv: {what}"));
    let deadline = Instant::now() + QUICK;
    let mut buf = [0u8; 64];
    // A few bytes that stay a few bytes for this long are all there is (a frame of ours
    // comes in one write, its length word first).
    let mut partial_since: Option<Instant> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ready = control::readable(ctl, left.as_millis().min(i32::MAX as u128) as i32);
        // SAFETY: buf is valid for its length; MSG_PEEK leaves the bytes for the frame reader.
        let n = unsafe {
            libc::recv(ctl.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_PEEK | libc::MSG_DONTWAIT)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ECONNRESET) {
                return Err(not_ours(
                    "it reset the connection at our greeting, as iperf2's server (iperf -s) does: to test against \
                     iperf -s use send --iperf2"
                        .into(),
                ));
            }
            if left.is_zero() || !ready {
                return Ok(()); // Nothing yet: the reply is read as usual.
            }
            continue;
        }
        if n == 0 {
            return Err(not_ours(
                "it closed the connection without an answer (iperf2's server, iperf -s, does; to test against it use \
                 send --iperf2)"
                    .into(),
            ));
        }
        let since = *partial_since.get_or_insert_with(Instant::now);
        let settled = left.is_zero() || since.elapsed() >= Duration::from_millis(200);
        match judge(&buf[..n as usize], settled) {
            Verdict::Ours => return Ok(()),
            Verdict::Foreign(what) => return Err(not_ours(what)),
            Verdict::More if settled => return Ok(()),
            Verdict::More => std::thread::sleep(Duration::from_millis(20).min(left)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_name_the_service() {
        let named = |b: &[u8], settled| match judge(b, settled) {
            Verdict::Foreign(what) => what,
            other => panic!("{b:?}: {other:?}"),
        };
        assert!(named(b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\n", false).contains("HTTP server"));
        assert!(named(b"SSH-2.0-OpenSSH_9.6\r\n", false).contains("SSH server answers there (\"SSH-2.0-OpenSSH_9.6\")"));
        assert!(named(&[9], true).contains("--iperf3"));
        assert_eq!(judge(&[9], false), Verdict::More, "a byte more may come");
        assert!(named(b"\x7f\xff\xff\xffabc", false).contains("not uringbench"));
        assert_eq!(judge(&[0, 0, 0, 40, b'{'], false), Verdict::Ours, "a frame of ours");
    }
}
