//! What a hostile peer sends to `recv` cannot forge or flood its log: peer-supplied text is
//! escaped onto one line and cut to 200 bytes (the first step of the public-receiver work).

mod common;

use common::*;
use std::time::Duration;

/// Python that connects to the receiver as a control session and sends one framed JSON
/// message of `type` `kind`, then waits for the receiver's answer or its close.
fn crafted_hello(kind_expr: &str) -> String {
    format!(
        r#"import socket, struct, json
s = socket.create_connection(("{RECV_ADDR}", 5300), timeout=5)
body = json.dumps({{"type": {kind_expr}}}).encode()
s.sendall(b"UBC1" + struct.pack(">I", len(body)) + body)
try:
    s.recv(65536)
except Exception:
    pass
"#
    )
}

#[test]
fn a_peer_cannot_forge_a_log_line_or_flood_one() {
    let _serial = serial();
    let pair = NetnsPair::up("uohl");
    let recv = pair.spawn_recv(&[]);
    for kind in [r#""hello\n[99] done 6.6.6.6:1: received 1 bytes\r\u001b[2K""#, r#""x" * 60000"#] {
        let out = pair
            .cmd(&pair.sender_ns(), "timeout", &["10", "python3", "-c", &crafted_hello(kind)])
            .output()
            .expect("python3");
        assert!(out.status.success(), "crafted hello: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The receiver still serves a real test afterwards.
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-t", "1s", "--warmup", "0s", "-J"], Duration::from_secs(30));
    assert!(out.status.success(), "a real send after the crafted ones: {}", String::from_utf8_lossy(&out.stderr));
    let log = recv.kill();
    let text = String::from_utf8_lossy(&log.stdout);
    let peer_lines: Vec<&str> = text.lines().filter(|l| l.contains("10.77.0.1")).collect();
    assert!(peer_lines.len() >= 3, "the crafted connections and the real test are logged: {text}");
    assert!(!text.lines().any(|l| l.starts_with("[99]")), "no forged line: {text}");
    assert!(text.contains("\\n[99] done 6.6.6.6:1"), "the forged text is shown escaped on its line: {text}");
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "no terminal control reaches the log");
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 600, "a 60 KB message type is cut, the longest line has {longest} bytes: {text}");
    assert!(text.contains("bytes more)"), "the cut says how much was left out: {text}");
}
