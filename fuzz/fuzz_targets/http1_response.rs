//! The `http` workload's response parser, fed a server's byte stream cut into reads at
//! places the input chooses: the first byte picks the read size and whether the request was
//! HEAD. Checks that a response never claims more bytes than were fed, and that cutting the
//! same stream differently gives the same responses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::wire::http1::{ParseError, Response, ResponseParser};

/// Parses responses one after another (keep-alive), `step` bytes per read; returns the
/// responses and how the stream ended.
fn run(stream: &[u8], step: usize, head_only: bool) -> (Vec<Response>, Option<Result<Response, ParseError>>) {
    let mut parser = ResponseParser::new(head_only);
    let mut done = Vec::new();
    let mut fed = 0u64;
    for read in stream.chunks(step) {
        let mut at = 0;
        fed += read.len() as u64;
        while at < read.len() {
            match parser.feed(&read[at..]) {
                Ok(Some((response, used))) => {
                    assert!(used <= read.len() - at, "used {used} of {} bytes", read.len() - at);
                    assert!(response.body_bytes <= fed, "a {}-byte body from {fed} bytes", response.body_bytes);
                    at += used;
                    done.push(response);
                    parser.reset(head_only);
                }
                Ok(None) => break,
                Err(e) => return (done, Some(Err(e))),
            }
        }
    }
    if parser.started() {
        return (done, Some(parser.eof()));
    }
    (done, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, stream)) = data.split_first() else { return };
    let head_only = ctl & 0x80 != 0;
    let step = usize::from(ctl & 0x7F) + 1;
    let (whole, whole_end) = run(stream, stream.len().max(1), head_only);
    let (pieces, pieces_end) = run(stream, step, head_only);
    // A read-to-close body counts whatever arrives, and an error may come at a different
    // response when earlier reads were shorter, so compare only clean, complete parses.
    if whole_end.is_none() && pieces_end.is_none() {
        assert_eq!(whole, pieces, "cutting the stream into {step}-byte reads changed the responses");
    }
});
