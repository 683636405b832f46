//! An incremental, bounded HTTP/1.1 response parser for the `http` workload.
//!
//! A load generator reads whatever a server sends, including broken or hostile responses, so
//! this parser never buffers more than [`MAX_HEAD`] bytes of status line and headers (or of a
//! chunk-size line plus trailers), never panics on bad input, and names what was wrong. Bodies
//! are counted, not stored. One response is parsed at a time (no pipelining): bytes after a
//! complete response are reported back to the caller, which treats them as a protocol error.

use crate::base::error::Error;
use std::fmt;

/// Most bytes of a response head (status line + headers), and of chunked trailers.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Most bytes of one chunk-size line (size, extensions and CRLF).
const MAX_CHUNK_LINE: usize = 4096;

/// Why a response could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The head (or the trailers) went past [`MAX_HEAD`] without ending.
    OversizedHeaders,
    /// Anything else that is not HTTP/1.x; the text says what.
    Malformed(&'static str),
    /// The connection ended before the response did.
    Truncated,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::OversizedHeaders => write!(f, "response headers larger than {MAX_HEAD} bytes"),
            ParseError::Malformed(what) => write!(f, "malformed response: {what}"),
            ParseError::Truncated => f.write_str("connection closed before the response was complete"),
        }
    }
}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Whether the connection may carry another request.
    pub keep_alive: bool,
    /// Body bytes (after de-chunking).
    pub body_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading a `size[;ext]\r\n` line.
    Size,
    /// Reading chunk data, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after chunk data; how many of its two bytes were seen.
    DataEnd(u8),
    /// Reading trailer lines up to the empty line.
    Trailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    Chunked(ChunkState),
    UntilClose,
    Done,
}

/// Parses one response at a time; [`ResponseParser::reset`] before each request.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    /// Head bytes, then the pending chunk-size or trailer line; never above [`MAX_HEAD`].
    line: Vec<u8>,
    head_only: bool,
    status: u16,
    keep_alive: bool,
    body_bytes: u64,
    trailer_bytes: usize,
}

impl ResponseParser {
    /// `head_only`: the request was HEAD, so the response has no body whatever it says.
    pub fn new(head_only: bool) -> Self {
        Self {
            state: State::Head,
            line: Vec::new(),
            head_only,
            status: 0,
            keep_alive: true,
            body_bytes: 0,
            trailer_bytes: 0,
        }
    }

    /// Gets ready for the next response on the same connection.
    pub fn reset(&mut self, head_only: bool) {
        self.state = State::Head;
        self.line.clear();
        self.head_only = head_only;
        self.status = 0;
        self.keep_alive = true;
        self.body_bytes = 0;
        self.trailer_bytes = 0;
    }

    /// Whether any byte of the current response has been seen.
    pub fn started(&self) -> bool {
        self.state != State::Head || !self.line.is_empty()
    }

    /// Feeds received bytes. Returns the finished response and how many bytes of `data` it
    /// used, or `None` when more bytes are needed.
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<(Response, usize)>, ParseError> {
        let mut at = 0;
        while at < data.len() {
            let rest = &data[at..];
            match self.state {
                State::Done => break,
                State::Head => {
                    // The usual case: a whole head at the start of one read, parsed in place.
                    if self.line.is_empty() {
                        let window = &rest[..rest.len().min(MAX_HEAD + 1)];
                        if let Some(pos) = find_head_end(window) {
                            let end = pos + 4;
                            self.parse_head_bytes(&rest[..end])?;
                            at += end;
                            continue;
                        }
                    }
                    // The end of the head may straddle two reads: look from 3 bytes back.
                    let before = self.line.len();
                    let take = rest.len().min(MAX_HEAD + 1 - before);
                    self.line.extend_from_slice(&rest[..take]);
                    let from = before.saturating_sub(3);
                    match find_head_end(&self.line[from..]) {
                        Some(pos) => {
                            let end = from + pos + 4;
                            at += end - before;
                            self.line.truncate(end);
                            self.parse_head()?;
                            self.line.clear();
                        }
                        None if self.line.len() > MAX_HEAD => return Err(ParseError::OversizedHeaders),
                        None => at += take,
                    }
                }
                State::Length(left) => {
                    let n = (rest.len() as u64).min(left);
                    self.body_bytes += n;
                    at += n as usize;
                    self.state = if left == n { State::Done } else { State::Length(left - n) };
                }
                State::UntilClose => {
                    self.body_bytes += rest.len() as u64;
                    at = data.len();
                }
                State::Chunked(cs) => at += self.chunked(cs, rest)?,
            }
        }
        if self.state == State::Done {
            return Ok(Some((self.response(), at)));
        }
        Ok(None)
    }

    /// The peer closed the connection: completes a read-to-close body, else it is truncated.
    pub fn eof(&mut self) -> Result<Response, ParseError> {
        match self.state {
            State::UntilClose | State::Done => {
                self.keep_alive = false;
                self.state = State::Done;
                Ok(self.response())
            }
            _ => Err(ParseError::Truncated),
        }
    }

    fn response(&self) -> Response {
        Response { status: self.status, keep_alive: self.keep_alive, body_bytes: self.body_bytes }
    }

    /// One step of a chunked body; returns bytes used.
    fn chunked(&mut self, cs: ChunkState, rest: &[u8]) -> Result<usize, ParseError> {
        match cs {
            ChunkState::Size | ChunkState::Trailers => {
                let (limit, err) = if cs == ChunkState::Size {
                    (MAX_CHUNK_LINE, ParseError::Malformed("chunk-size line too long"))
                } else {
                    (MAX_HEAD.saturating_sub(self.trailer_bytes), ParseError::OversizedHeaders)
                };
                let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                    if self.line.len() + rest.len() > limit {
                        return Err(err);
                    }
                    self.line.extend_from_slice(rest);
                    return Ok(rest.len());
                };
                if self.line.len() + nl + 1 > limit {
                    return Err(err);
                }
                self.line.extend_from_slice(&rest[..nl + 1]);
                let line = std::mem::take(&mut self.line);
                let text = line.strip_suffix(b"\r\n").ok_or(ParseError::Malformed("bare LF in chunked framing"))?;
                if cs == ChunkState::Size {
                    let size = parse_chunk_size(text)?;
                    self.state = State::Chunked(if size == 0 { ChunkState::Trailers } else { ChunkState::Data(size) });
                } else if text.is_empty() {
                    self.state = State::Done;
                } else {
                    self.trailer_bytes += line.len();
                    if !text.contains(&b':') {
                        return Err(ParseError::Malformed("trailer line without a colon"));
                    }
                }
                self.line = line;
                self.line.clear();
                Ok(nl + 1)
            }
            ChunkState::Data(left) => {
                let n = (rest.len() as u64).min(left);
                self.body_bytes += n;
                self.state =
                    State::Chunked(if n == left { ChunkState::DataEnd(0) } else { ChunkState::Data(left - n) });
                Ok(n as usize)
            }
            ChunkState::DataEnd(seen) => {
                let want = if seen == 0 { b'\r' } else { b'\n' };
                if rest[0] != want {
                    return Err(ParseError::Malformed("chunk data not followed by CRLF"));
                }
                self.state = State::Chunked(if seen == 0 { ChunkState::DataEnd(1) } else { ChunkState::Size });
                Ok(1)
            }
        }
    }

    /// Parses `self.line` (the complete head, CRLF CRLF included) and picks the body framing.
    fn parse_head(&mut self) -> Result<(), ParseError> {
        let head = std::mem::take(&mut self.line);
        let result = self.parse_head_bytes(&head);
        self.line = head;
        result
    }

    fn parse_head_bytes(&mut self, head: &[u8]) -> Result<(), ParseError> {
        let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        let status_line = lines.next().unwrap_or_default();
        let (version, status) = parse_status_line(status_line)?;
        self.status = status;
        // HTTP/1.0 closes unless it says keep-alive; HTTP/1.1 stays open unless it says close.
        let mut keep_alive = version == 1;
        let mut length: Option<u64> = None;
        let mut chunked = false;
        for line in lines {
            if line.is_empty() {
                break;
            }
            let colon =
                line.iter().position(|&b| b == b':').ok_or(ParseError::Malformed("header line without a colon"))?;
            let name = &line[..colon];
            if name.is_empty() || name.iter().any(|b| !is_token(*b)) {
                return Err(ParseError::Malformed("invalid header name"));
            }
            let value = trim(&line[colon + 1..]);
            if name.eq_ignore_ascii_case(b"content-length") {
                let v = parse_decimal(value).ok_or(ParseError::Malformed("invalid Content-Length"))?;
                if length.is_some_and(|l| l != v) {
                    return Err(ParseError::Malformed("conflicting Content-Length headers"));
                }
                length = Some(v);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let last = value.rsplit(|&b| b == b',').next().map(trim).unwrap_or_default();
                if last.eq_ignore_ascii_case(b"chunked") {
                    chunked = true;
                } else {
                    return Err(ParseError::Malformed("Transfer-Encoding without chunked last"));
                }
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && version == 0 {
                        keep_alive = true;
                    }
                }
            }
        }
        self.keep_alive = keep_alive;
        if (100..200).contains(&status) {
            // An interim response (100 Continue, 103 Early Hints): the real one follows.
            self.status = 0;
            self.keep_alive = true;
            self.state = State::Head;
            return Ok(());
        }
        let no_body = self.head_only || status == 204 || status == 304;
        self.state = if no_body {
            State::Done
        } else if chunked {
            State::Chunked(ChunkState::Size)
        } else if let Some(len) = length {
            if len == 0 {
                State::Done
            } else {
                State::Length(len)
            }
        } else {
            self.keep_alive = false;
            State::UntilClose
        };
        Ok(())
    }
}

/// `HTTP/1.x SSS reason` → (minor version, status).
fn parse_status_line(line: &[u8]) -> Result<(u8, u16), ParseError> {
    let bad = ParseError::Malformed("invalid status line");
    let rest = line.strip_prefix(b"HTTP/1.").ok_or(bad.clone())?;
    let (&minor, rest) = rest.split_first().ok_or(bad.clone())?;
    if !(minor == b'0' || minor == b'1') || rest.first() != Some(&b' ') || rest.len() < 4 {
        return Err(bad);
    }
    let code = &rest[1..4];
    if !code.iter().all(u8::is_ascii_digit) || rest.get(4).is_some_and(|&b| b != b' ') {
        return Err(bad);
    }
    let status = code.iter().fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    if status < 100 {
        return Err(bad);
    }
    Ok((minor - b'0', status))
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let digits = line.split(|&b| b == b';').next().map(trim).unwrap_or_default();
    if digits.is_empty() || digits.len() > 15 {
        return Err(ParseError::Malformed("invalid chunk size"));
    }
    let mut size = 0u64;
    for &b in digits {
        let d = (b as char).to_digit(16).ok_or(ParseError::Malformed("invalid chunk size"))?;
        size = size * 16 + u64::from(d);
    }
    Ok(size)
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')))
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &v[start..end]
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Where the blank line ending a head (`\r\n\r\n`) starts. Jumps from line feed to line
/// feed: a head has a dozen lines, so this touches each byte once with a simple loop instead
/// of comparing a 4-byte window at every position.
fn find_head_end(hay: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = hay[from..].iter().position(|&b| b == b'\n') {
        let lf = from + p;
        if lf >= 3 && &hay[lf - 3..=lf] == b"\r\n\r\n" {
            return Some(lf - 3);
        }
        from = lf + 1;
    }
    None
}

/// A parsed `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpUrl {
    /// Host as written (brackets kept for IPv6), for the `Host` header.
    pub host_header: String,
    /// Host without brackets, for resolving.
    pub host: String,
    pub port: u16,
    /// Path and query, at least `/`.
    pub path: String,
}

impl HttpUrl {
    /// Parses `http://host[:port][/path]`; https and other schemes are usage errors.
    pub(crate) fn parse(url: &str) -> crate::base::error::Result<Self> {
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(Error::usage(format!(
                "'{url}': https is not supported (uringbench http speaks plain HTTP/1.1; use an http:// URL)"
            )));
        }
        let rest = url
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case("http://"))
            .map(|_| &url[7..])
            .ok_or_else(|| Error::usage(format!("'{url}': the URL must start with http://")))?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let path = path.split('#').next().unwrap_or("/").to_string();
        if authority.contains('@') {
            return Err(Error::usage(format!("'{url}': user info in URLs is not supported")));
        }
        let bad = || Error::usage(format!("'{url}': invalid host or port"));
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad()),
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        let port = match port {
            None => 80,
            Some(p) => p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(bad)?,
        };
        if host.is_empty()
            || host.chars().any(|c| c.is_whitespace() || c.is_control())
            || path.contains(char::is_whitespace)
        {
            return Err(bad());
        }
        Ok(Self { host_header: authority.to_string(), host, port, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = HttpUrl::parse("http://127.0.0.1:8080/a?b=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str(), u.host_header.as_str()),
            ("127.0.0.1", 8080, "/a?b=1", "127.0.0.1:8080")
        );
        let u = HttpUrl::parse("http://[::1]:81").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str(), u.host_header.as_str()), ("::1", 81, "/", "[::1]:81"));
        let u = HttpUrl::parse("HTTP://localhost?x").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/?x"));
        let e = HttpUrl::parse("https://example.com/").unwrap_err();
        assert!(e.message.contains("https is not supported") && e.exit_code() == 2);
        for bad in ["ftp://x/", "http://", "http://h:0/", "http://h:99999/", "http://[::1/", "http://a b/"] {
            assert_eq!(HttpUrl::parse(bad).map_err(|e| e.exit_code()), Err(2), "{bad}");
        }
    }

    /// Feeds `text` one byte at a time (the hardest split) and whole; both must agree.
    fn parse(text: &[u8], head_only: bool) -> Result<Option<(Response, usize)>, ParseError> {
        let mut whole = ResponseParser::new(head_only);
        let expected = whole.feed(text);
        let mut bytewise = ResponseParser::new(head_only);
        let mut got = Ok(None);
        for (i, b) in text.iter().enumerate() {
            got = bytewise.feed(std::slice::from_ref(b));
            match &got {
                Ok(Some((r, _))) => {
                    got = Ok(Some((*r, i + 1)));
                    break;
                }
                Err(_) => break,
                Ok(None) => {}
            }
        }
        assert_eq!(got, expected, "byte-by-byte and whole feeding agree");
        expected
    }

    #[test]
    fn head_end_is_the_first_blank_line() {
        assert_eq!(find_head_end(b"\r\n\r\n"), Some(0));
        assert_eq!(find_head_end(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody\r\n\r\n"), Some(21));
        assert_eq!(find_head_end(b"\n\r\n"), None, "a bare LF does not end the head");
        assert_eq!(find_head_end(b"x\r\n\n\r\n"), None);
        assert_eq!(find_head_end(b""), None);
    }

    #[test]
    fn content_length_and_leftover() {
        let text = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
        let (r, used) = parse(text, false).unwrap().unwrap();
        assert_eq!((r.status, r.keep_alive, r.body_bytes), (200, true, 5));
        assert_eq!(used, text.len() - 5, "bytes after the response are left to the caller");
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;name=v\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n";
        let (r, used) = parse(text, false).unwrap().unwrap();
        assert_eq!((r.status, r.body_bytes, used), (200, 9, text.len()));
    }

    #[test]
    fn no_body_cases() {
        for text in [
            &b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ] {
            let (r, _) = parse(text, false).unwrap().unwrap();
            assert!(r.body_bytes == 0 && r.keep_alive, "{}", String::from_utf8_lossy(text));
        }
        let (r, _) = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true).unwrap().unwrap();
        assert_eq!(r.body_bytes, 0, "HEAD has no body");
    }

    #[test]
    fn close_and_read_to_close() {
        let (r, _) =
            parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
        assert!(!r.keep_alive);
        let (r, _) = parse(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
        assert!(!r.keep_alive, "HTTP/1.0 closes by default");
        let mut p = ResponseParser::new(false);
        assert_eq!(p.feed(b"HTTP/1.1 200 OK\r\n\r\nabc").unwrap(), None);
        let r = p.eof().unwrap();
        assert_eq!((r.body_bytes, r.keep_alive), (3, false));
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        for bad in [
            &b"garbage\r\n\r\n"[..],
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 099 x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
        ] {
            assert!(matches!(parse(bad, false), Err(ParseError::Malformed(_))), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn oversized_headers_are_bounded() {
        let mut p = ResponseParser::new(false);
        let filler = vec![b'a'; 1024];
        let mut result = p.feed(b"HTTP/1.1 200 OK\r\nX: ");
        for _ in 0..100 {
            result = p.feed(&filler);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(ParseError::OversizedHeaders));
        assert!(p.line.capacity() <= 2 * MAX_HEAD + 2048, "buffer stays bounded");
    }

    #[test]
    fn truncated_chunked_body() {
        let mut p = ResponseParser::new(false);
        assert_eq!(p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc").unwrap(), None);
        assert_eq!(p.eof(), Err(ParseError::Truncated));
    }
}
