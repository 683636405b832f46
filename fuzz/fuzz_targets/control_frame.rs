//! The control channel's frame reader and message decoder, fed a byte stream as a peer would
//! send it: the 4-byte greeting (`UBC1` control, `UBD1` data flow) and then frames, read with
//! both limits the engine uses (the receiver's and the sender's).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use std::time::Duration;
use uringbench::session::control::{self, ControlMsg, MAX_FRAME, MAX_REPORT};

fn read_all(stream: &[u8], limit: usize) {
    let mut cursor = Cursor::new(stream);
    // Each message consumes at least a 4-byte word, so this ends.
    while let Ok(msg) = control::read_frames(&mut cursor, Duration::from_secs(1), limit) {
        let body = serde_json::to_vec(&msg).expect("a decoded message encodes");
        assert!(body.len() <= 2 * limit + 1024, "re-encoding grew a {limit}-byte-limited message to {}", body.len());
        let again: ControlMsg = serde_json::from_slice(&body).expect("an encoded message decodes again");
        assert_eq!(
            std::mem::discriminant(&again),
            std::mem::discriminant(&msg),
            "the message type survives a round trip"
        );
    }
    assert!(cursor.position() as usize <= stream.len());
}

fuzz_target!(|data: &[u8]| {
    match data.get(..4) {
        Some(m) if m == control::DATA_MAGIC => {
            if let Some(rest) = data.get(4..control::DATA_HELLO_LEN) {
                let rest: &[u8; control::DATA_HELLO_LEN - 4] = rest.try_into().expect("20 bytes");
                let (cookie, flow) = control::parse_data_hello(rest);
                assert_eq!(&control::data_hello(&cookie, flow)[..], &data[..control::DATA_HELLO_LEN]);
            }
        }
        Some(m) if m == control::CONTROL_MAGIC => {
            read_all(&data[4..], MAX_FRAME);
            read_all(&data[4..], MAX_REPORT);
        }
        _ => read_all(data, MAX_FRAME),
    }
});
