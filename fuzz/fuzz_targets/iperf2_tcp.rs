//! iperf2's TCP test header as `recv --iperf2` reads it from a new connection: the first word
//! classifies the stream, a header of the length it announces follows; also the header ack a
//! client reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::wire::iperf2::{
    classify_tcp_first_word, version_string, ClientHdrAck, TcpClientHeader, TcpClientKind, MAX_HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Some(ack) = ClientHdrAck::decode(data) {
        let again = ClientHdrAck::decode(&ack.encode()).expect("an encoded ack decodes");
        assert_eq!(again.version, ack.version);
        assert_eq!(again.flags, ack.flags);
        assert_eq!(again.times.is_some(), ack.times.is_some());
    }
    let Some(first) = data.get(..4) else { return };
    let word = u32::from_be_bytes([first[0], first[1], first[2], first[3]]);
    match classify_tcp_first_word(word) {
        TcpClientKind::PlainData | TcpClientKind::BounceBack => {}
        TcpClientKind::Header(word) => {
            // The receiver allocates and reads this much before any data: it must stay small.
            assert!(word.len_bytes >= 4 && word.len_bytes <= MAX_HEADER_LEN, "header of {} bytes", word.len_bytes);
            assert_eq!(word.rest_len() + 4, word.len_bytes);
            let mut header = vec![0u8; word.len_bytes as usize];
            let have = data.len().min(header.len());
            header[..have].copy_from_slice(&data[..have]);
            let h = TcpClientHeader::parse(word, &header);
            let _ = h.receiver_must_send();
            assert!(h.ack_len() == 28 || h.ack_len() == 52);
            if let Some((u, l)) = h.peer_version {
                assert!(!version_string(u, l).is_empty());
            }
            // Parsing a longer buffer reads only the announced header.
            let longer = TcpClientHeader::parse(word, data);
            if data.len() >= word.len_bytes as usize {
                assert_eq!(longer, h, "bytes past the header are data, not header");
            }
        }
    }
});
