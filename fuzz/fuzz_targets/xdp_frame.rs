//! The AF_XDP receiver's frame parser (Ethernet, IPv4/IPv6, UDP, checksums) on arbitrary
//! frames, and the sender's frame template: a frame it writes for addresses, ports, payload
//! length and sequence number from the input must parse back to the same values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uringbench::wire::frame::{parse_udp, FlowAddrs, FrameTemplate, UdpChecksum};
use uringbench::wire::udp_payload::{self as payload, WireTime, MAX_SEQ};

fn template_round_trip(data: &[u8]) {
    let Some(b) = data.get(..60) else { return };
    let ipv6 = b[0] & 1 != 0;
    let fin = b[0] & 2 != 0;
    let (src, dst): (IpAddr, IpAddr) = if ipv6 {
        let s: [u8; 16] = b[1..17].try_into().expect("16 bytes");
        let d: [u8; 16] = b[17..33].try_into().expect("16 bytes");
        (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into())
    } else {
        let s: [u8; 4] = b[1..5].try_into().expect("4 bytes");
        let d: [u8; 4] = b[5..9].try_into().expect("4 bytes");
        (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into())
    };
    let word = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let a = FlowAddrs {
        src_mac: b[33..39].try_into().expect("6 bytes"),
        dst_mac: b[39..45].try_into().expect("6 bytes"),
        src,
        dst,
        src_port: word(45),
        dst_port: word(47),
    };
    let payload_len = usize::from(word(49)) % 9000;
    let seq = u64::from_be_bytes(b[51..59].try_into().expect("8 bytes")) % MAX_SEQ + 1;
    let sent = WireTime { sec: (u32::from(word(1)) << 16 | u32::from(word(3))).max(1), usec: u32::from(b[59]) * 3900 };
    let Ok(t) = FrameTemplate::new(&a, payload_len) else {
        assert!(payload_len < payload::HEADER_LEN, "a {payload_len}-byte payload was refused");
        return;
    };
    let mut buf = vec![0u8; t.frame_len()];
    assert_eq!(t.write(&mut buf, seq, sent, fin), buf.len());
    let p = parse_udp(&buf).expect("our own frame parses");
    assert_eq!((p.src, p.src_port, p.dst_port, p.payload.len()), (src, a.src_port, a.dst_port, payload_len));
    assert_eq!(p.checksum, UdpChecksum::Verified);
    let d = payload::decode(p.payload).expect("our own payload decodes");
    assert_eq!((d.seq, d.fin, d.sent), (seq, fin, Some(sent)));
}

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = parse_udp(data) {
        assert!(p.payload.len() + 14 + 8 <= data.len());
        let _ = payload::decode(p.payload);
    }
    template_round_trip(data);
});
