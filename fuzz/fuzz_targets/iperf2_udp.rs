//! iperf2's UDP datagrams as `recv --iperf2` and `send --iperf2` read them: the sequence header
//! at the front of every datagram, the client's test settings in a first datagram (the
//! receiver peeks at 128 bytes), and the server report a client reads after its FIN.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::wire::iperf2::{ServerReport, UdpClientHeader};
use uringbench::wire::udp_payload::{self as payload, MAX_SEQ};

fuzz_target!(|data: &[u8]| {
    let head = &data[..data.len().min(128)];
    if let Some(d) = payload::decode(head) {
        assert!(d.seq >= 1 && d.seq <= MAX_SEQ + 1, "sequence {} from a datagram", d.seq);
        if let Some(sent) = d.sent {
            assert!(sent.usec < 1_000_000);
        }
        if !d.fin && d.seq64 && d.seq <= MAX_SEQ {
            let mut buf = [0u8; payload::HEADER_LEN];
            if let Some(sent) = d.sent {
                payload::encode(&mut buf, d.seq, sent).expect("a decoded sequence number encodes");
                assert_eq!(payload::decode(&buf).map(|e| e.seq), Some(d.seq));
            }
        }
    }
    if let Some(h) = UdpClientHeader::parse(head) {
        let _ = h.receiver_must_send();
        assert!(!(h.no_udp_fin || h.isochronous) || h.peer_version.is_some(), "stateless flags need the extension");
    }
    if let Some(report) = ServerReport::decode(data) {
        let again = ServerReport::decode(&report.encode()).expect("an encoded report decodes");
        assert_eq!(again.datagrams, report.datagrams);
        assert_eq!((again.lost, again.out_of_order, again.bytes), (report.lost, report.out_of_order, report.bytes));
    }
});
