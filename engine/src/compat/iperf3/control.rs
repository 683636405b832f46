//! iperf3's control connection as both roles use it: one-byte states and length-prefixed JSON,
//! every read bounded in size and in time.

use crate::wire::iperf3::{json_len, json_message, server_error_text, State};
use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The control connection of one test.
pub(super) struct Control {
    pub(super) stream: TcpStream,
}

impl Control {
    pub(super) fn new(stream: TcpStream) -> Self {
        let _ = stream.set_nodelay(true);
        Control { stream }
    }

    pub(super) fn send_state(&mut self, state: State) -> Result<(), String> {
        self.stream.write_all(&[state.byte()]).map_err(|e| format!("writing {state:?} on the control connection: {e}"))
    }

    pub(super) fn send_json(&mut self, doc: &Value) -> Result<(), String> {
        self.stream.write_all(&json_message(doc)).map_err(|e| format!("writing JSON on the control connection: {e}"))
    }

    /// Fills `buf` by `deadline`; `what` names it in errors.
    pub(super) fn read_by(&mut self, buf: &mut [u8], deadline: Instant, what: &str) -> Result<(), String> {
        read_exact_by(&mut self.stream, buf, deadline).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => format!("timed out waiting for {what}"),
            io::ErrorKind::UnexpectedEof => format!("the control connection closed before {what}"),
            _ => format!("reading {what}: {e}"),
        })
    }

    /// The next state, within `within`; [`State::ServerError`] comes back as the error it
    /// carries.
    pub(super) fn read_state(&mut self, within: Duration) -> Result<State, String> {
        let deadline = Instant::now() + within;
        let mut b = [0u8; 1];
        self.read_by(&mut b, deadline, "a state byte")?;
        let state = State::from_byte(b[0])?;
        if state == State::ServerError {
            let mut word = [0u8; 4];
            self.read_by(&mut word, deadline, "the server's error number")?;
            let code = i32::from_be_bytes(word);
            // Then errno, except where a stock server writes the number alone and closes (its
            // authorization refusal): no errno then.
            let errno_by = deadline.min(Instant::now() + Duration::from_secs(1));
            let errno = match self.read_by(&mut word, errno_by, "the server's errno") {
                Ok(()) => i32::from_be_bytes(word),
                Err(_) => 0,
            };
            let os = if errno > 0 { format!(": {}", io::Error::from_raw_os_error(errno)) } else { String::new() };
            return Err(format!("the iperf3 server reported an error: {}{os}", server_error_text(code)));
        }
        Ok(state)
    }

    /// One JSON message of at most `max` bytes, within `within`.
    pub(super) fn read_json(&mut self, max: u32, within: Duration, what: &str) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + within;
        let mut prefix = [0u8; 4];
        self.read_by(&mut prefix, deadline, what)?;
        let len = json_len(prefix, max).map_err(|e| format!("{what}: {e}"))?;
        let mut body = vec![0u8; len];
        self.read_by(&mut body, deadline, what)?;
        Ok(body)
    }
}

/// `read_exact` that gives up at `deadline` (TimedOut), however slowly the bytes come.
pub(super) fn read_exact_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
