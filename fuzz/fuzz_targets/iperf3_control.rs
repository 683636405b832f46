//! An iperf3 control connection as `recv --iperf3` and `send --iperf3` read it, fed as a peer
//! would send it: the 37-byte cookie, then state bytes and length-prefixed JSON (parameters,
//! results), each message read with the limits the engine uses; also the UDP datagram header,
//! as such and as the UDP loops read and write it (`DatagramHeader::Iperf3`); and the input as
//! the text a client's `authtoken` decrypts to, and as an authorized-users file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::wire::iperf3::auth::{AuthorizedUsers, Credentials};
use uringbench::wire::iperf3::{
    check_cookie, json_len, server_error_text, Params, Results, State, UdpHeader, COOKIE_LEN, MAX_PARAMS_LEN,
    MAX_RESULTS_LEN,
};
use uringbench::wire::udp_payload::DatagramHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Credentials::parse(data) {
        assert_eq!(Credentials::parse(c.to_text().as_bytes()), Ok(c), "what is read is what a client writes");
    }
    if let Ok(Ok(users)) = std::str::from_utf8(data).map(AuthorizedUsers::parse) {
        assert!(!users.is_empty(), "a file that lets no one in is refused");
        assert!(!users.admits("", ""), "no user has an empty name");
    }
    if let Some(h) = UdpHeader::decode(data, data.first().is_some_and(|b| b & 1 == 1)) {
        let mut buf = [0u8; 16];
        h.encode(true, &mut buf);
        assert_eq!(UdpHeader::decode(&buf, true), Some(h), "a header survives the 64-bit form");
    }
    let format = DatagramHeader::Iperf3 { wide: data.first().is_some_and(|b| b & 2 == 2) };
    if let Some(d) = format.decode(data) {
        assert!(d.seq != 0 && !d.fin, "iperf3 datagrams carry no end marker");
        let mut buf = [0u8; 16];
        format.encode(&mut buf, d.seq, d.sent.unwrap_or_default()).expect("16 bytes hold either width");
        assert_eq!(format.decode(&buf).map(|e| (e.seq, e.sent)), Some((d.seq, d.sent)));
    }
    let rest = match data.get(..COOKIE_LEN) {
        Some(cookie) if check_cookie(cookie).is_ok() => &data[COOKIE_LEN..],
        _ => data,
    };
    let mut at = 0;
    // Each step consumes at least one byte, so this ends.
    while at < rest.len() {
        let prefix = rest.get(at..at + 4).map(|p| [p[0], p[1], p[2], p[3]]);
        if let Some(Ok(len)) = prefix.map(|p| json_len(p, MAX_RESULTS_LEN)) {
            assert!(len <= MAX_RESULTS_LEN as usize, "the reader allocates at most its limit");
            if let Some(body) = rest.get(at + 4..at + 4 + len) {
                if len <= MAX_PARAMS_LEN as usize {
                    if let Ok(p) = Params::parse(body) {
                        assert!(p.parallel >= 1 && p.connections() <= 256);
                        let again = Params::parse(p.to_json().to_string().as_bytes()).expect("our parameters parse");
                        assert_eq!(
                            (again.proto, again.time, again.parallel, again.len),
                            (p.proto, p.time, p.parallel, p.len)
                        );
                    }
                }
                if let Ok(r) = Results::parse(body) {
                    assert!(r.streams.len() <= 256);
                    let again = Results::parse(r.to_json().to_string().as_bytes()).expect("our results parse");
                    assert_eq!(again.streams.len(), r.streams.len());
                }
                at += 4 + len;
                continue;
            }
        }
        if let Ok(state) = State::from_byte(rest[at]) {
            assert_eq!(State::from_byte(state.byte()), Ok(state));
            if state == State::ServerError {
                if let Some(w) = rest.get(at + 1..at + 5) {
                    assert!(!server_error_text(i32::from_be_bytes([w[0], w[1], w[2], w[3]])).is_empty());
                }
            }
        }
        at += 1;
    }
});
