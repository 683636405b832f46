//! One way to stop, as a user meets it: a stop signal ends the running test with its partial
//! report, the same stop delivered twice (GNU `timeout`, a terminal's Ctrl-C to the process
//! group) counts once, and only a second signal at least half a second later forces an exit.
//! Real traffic between two namespaces.

mod common;

use common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn timeout_s_int_ends_a_send_with_its_partial_report() {
    let _serial = serial();
    let pair = NetnsPair::up("ubstop-t");
    let _recv = pair.spawn_recv(&[]);
    // GNU timeout signals its child, then its whole process group: two SIGINTs microseconds
    // apart, which must count as one stop. (--preserve-status: timeout's own exit is 124.)
    let c = pair.cmd(
        &pair.sender_ns(),
        "timeout",
        &["--preserve-status", "-s", "INT", "3", bin(), "send", "-c", RECV_ADDR, "-t", "10", "--warmup", "0s", "-J"],
    );
    let (out, took) = run_bounded(c, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "an interrupted test exits 1, not 130: {stderr}");
    assert!(took < Duration::from_secs(6), "ends soon after the signal at 3 s, took {took:?}");
    let doc = json(&out);
    assert_eq!(doc["complete"], false);
    assert!(
        doc["interrupted"]["reason"].as_str().unwrap().starts_with("SIGINT on the sender"),
        "{}",
        doc["interrupted"]
    );
    let at = f64_at(&doc, "/interrupted/at_seconds");
    assert!(at > 1.5 && at < 4.0, "interrupted about 3 s into the window, got {at}");
    assert!(u64_at(&doc, "/sum/receiver/bytes") > 0, "the receiver's figures for the part that ran");
    assert_eq!(
        u64_at(&doc, "/sum/receiver/total_bytes"),
        u64_at(&doc, "/sum/sender/total_bytes"),
        "the receiver counted every byte the sender wrote"
    );
    // The receiver's own count, not ours: the veth end received at least that many bytes.
    assert!(pair.receiver_if_counter("rx_bytes") >= u64_at(&doc, "/sum/receiver/total_bytes"));
}

#[test]
fn two_sigints_20_ms_apart_are_one_stop() {
    let _serial = serial();
    let pair = NetnsPair::up("ubstop-2");
    let _recv = pair.spawn_recv(&[]);
    let child = spawn_send(&pair, &["-c", RECV_ADDR, "-t", "10", "--warmup", "0s", "-J"]);
    std::thread::sleep(Duration::from_secs(2));
    // What a terminal's Ctrl-C or `timeout` delivers when the process runs in between: the
    // second copy is not a request to abandon the report.
    signal(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(20));
    signal(&child, libc::SIGINT);
    let out = finish(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1), "one stop, one partial report: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert!(doc["interrupted"]["reason"].as_str().unwrap().starts_with("SIGINT on the sender"));
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
}

/// SIGQUIT (Ctrl-\) stops a send as SIGINT does: its partial report, exit 1.
#[test]
fn sigquit_ends_a_send_with_its_partial_report() {
    let _serial = serial();
    let pair = NetnsPair::up("ubstop-q");
    let _recv = pair.spawn_recv(&[]);
    let child = spawn_send(&pair, &["-c", RECV_ADDR, "-t", "10", "--warmup", "0s", "-J"]);
    std::thread::sleep(Duration::from_secs(1));
    signal(&child, libc::SIGQUIT);
    let out = finish(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1), "a stop with its report: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert!(doc["interrupted"]["reason"].as_str().unwrap().starts_with("SIGQUIT on the sender"), "{doc}");
}

/// A receiver stand-in that accepts the control connection and never answers, so that the
/// sender sits in its handshake (which does not end at the first stop) for as long as it runs.
fn silent_listener(pair: &NetnsPair) -> std::process::Child {
    let script = "import socket, time\n\
                  s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                  s.bind(('0.0.0.0', 5300)); s.listen(8)\n\
                  c, _ = s.accept(); time.sleep(15)\n";
    let child = pair
        .cmd(&pair.receiver_ns(), "python3", &["-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    pair.wait_listening("5300");
    child
}

/// `uringbench send ARGS` in the sender's namespace, output piped, not waited for.
fn spawn_send(pair: &NetnsPair, args: &[&str]) -> std::process::Child {
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["send"]);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c.spawn().expect("spawn send")
}

fn signal(child: &std::process::Child, signo: i32) {
    // SAFETY: kill(2) on a child this test started and has not reaped (`ip netns exec` execs
    // the program, so the pid is uringbench's).
    assert_eq!(unsafe { libc::kill(child.id() as i32, signo) }, 0);
}

#[test]
fn a_second_signal_half_a_second_after_the_first_forces_the_exit() {
    let _serial = serial();
    let pair = NetnsPair::up("ubstop-f");
    let mut listener = silent_listener(&pair);
    let mut child = spawn_send(&pair, &["-c", RECV_ADDR, "-t", "5", "-J"]);
    std::thread::sleep(Duration::from_millis(700));
    signal(&child, libc::SIGINT);
    // The same stop again right away counts once: the sender is still waiting for the
    // handshake's reply.
    signal(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(800));
    assert!(child.try_wait().unwrap().is_none(), "one stop does not kill a sender in its handshake");
    signal(&child, libc::SIGINT);
    let forced = Instant::now();
    let out = finish(child, Duration::from_secs(5));
    let took = forced.elapsed();
    assert_eq!(out.status.code(), Some(130), "a second signal later exits 128 + SIGINT");
    assert!(took < Duration::from_secs(1), "at once, took {took:?}");
    let _ = listener.kill();
    let _ = listener.wait();
}

#[test]
fn sigint_ends_an_af_xdp_send_early() {
    let _serial = serial();
    let pair = NetnsPair::up("ubstop-x");
    let _recv = pair.spawn_recv(&[]);
    let child = spawn_send(
        &pair,
        &["-c", RECV_ADDR, "--engine", "xdp", "-t", "10", "--warmup", "0s", "-l", "1470", "-b", "50M", "-J"],
    );
    std::thread::sleep(Duration::from_secs(2));
    signal(&child, libc::SIGINT);
    let signalled = Instant::now();
    let out = finish(child, Duration::from_secs(15));
    let took = signalled.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "an interrupted test exits 1: {stderr}");
    // Before, the AF_XDP queues sent on to the planned end, 8 s after the signal.
    assert!(took < Duration::from_secs(4), "the AF_XDP sender stops with the test, took {took:?}");
    let doc = json(&out);
    assert!(doc["interrupted"]["reason"].as_str().unwrap().starts_with("SIGINT on the sender"));
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 0, "frames went out before the stop");
    // Paced far below what the pair carries, with FINs after the stop: every frame counted.
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "{}", doc["sum"]);
}
