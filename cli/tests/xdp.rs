//! `--engine xdp` between two namespaces (veth: native XDP, AF_XDP in copy mode): every frame
//! sent is counted or shows up in a named counter, mixed ends work, the host stays reachable
//! while the program is attached, the program is detached however `recv` ends, and bad input
//! gets one line naming the fix. Needs root (CI runs as root).

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether an XDP program is attached to the receiver's veth end (`ip link` shows `xdp`).
fn xdp_attached(pair: &NetnsPair) -> bool {
    let out =
        pair.cmd(&pair.receiver_ns(), "ip", &["link", "show", "dev", &pair.receiver_if()]).output().expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout);
    text.contains(" xdp") || text.contains("prog/xdp")
}

/// Whether any loaded BPF program is ours (`bpftool prog show`). bpftool is required
/// (scripts/install-deps.sh --test installs it): without it "nothing left loaded" would pass
/// unchecked. program_is_detached_after_sigint sees it true while attached, so the name matches.
fn our_program_loaded() -> bool {
    let out = Command::new("bpftool")
        .args(["prog", "show"])
        .output()
        .expect("bpftool (scripts/install-deps.sh --test installs it)");
    assert!(out.status.success(), "bpftool prog show: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).contains("uringbench_xdp")
}

fn send_json(pair: &NetnsPair, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--target", RECV_ADDR, "-J"];
    all.extend_from_slice(args);
    let (out, _) = pair.send(&all, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "send failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    json(&out)
}

/// Paced so that nothing is lost on two shared CPUs: exact counts are then required.
const PACED: [&str; 8] = ["-t", "1s", "--warmup", "200ms", "-l", "1470", "-b", "50M"];

#[test]
fn xdp_to_xdp_counts_every_frame_and_detaches_at_the_end() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa1");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    let mut args = vec!["--engine", "xdp"];
    args.extend_from_slice(&PACED);
    let doc = send_json(&pair, &args);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000, "50 Mbit/s of 1470 B for 1.2 s is about 5000 datagrams, got {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "every frame counted: {}", doc["receiver"]);
    assert_eq!(u64_at(&doc, "/sum/receiver/lost"), 0);
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    let rx = &doc["xdp"]["receiver"];
    assert_eq!(rx["program_mode"], "native", "veth runs XDP natively: {rx}");
    assert_eq!(rx["bind"], "copy", "veth has no zero-copy AF_XDP: {rx}");
    assert_eq!(doc["xdp"]["sender"]["bind"], "copy");
    // The program redirected the data frames and the FINs, and passed the control channel.
    let redirected = u64_at(rx, "/steer/redirected");
    assert!(redirected > sent, "data frames plus FINs redirected: {redirected} vs {sent}");
    assert_eq!(redirected, u64_at(rx, "/frames"), "every redirected frame was read");
    assert!(u64_at(rx, "/steer/passed") > 0, "the TCP control channel passed to the stack");
    assert_eq!(u64_at(rx, "/frame_len"), 1512);
    assert_eq!(u64_at(rx, "/malformed"), 0, "our frames pass the receiver's checks: {rx}");
    assert_eq!(u64_at(rx, "/checksum_unverified"), 0, "our frames carry full UDP checksums");
    let out = recv.finish(Duration::from_secs(10));
    assert!(out.status.success(), "recv --once: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!xdp_attached(&pair), "program detached after the test");
    assert!(!our_program_loaded(), "program unloaded after recv ended");
}

#[test]
fn pps_sets_the_frame_rate() {
    let _serial = serial();
    let pair = NetnsPair::up("uxab");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    let doc = send_json(
        &pair,
        &["--engine", "xdp", "-t", "2s", "--warmup", "0s", "--cooldown", "0s", "-l", "22", "--pps", "20k"],
    );
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    // --pps is a ceiling: at most 20k frames/s for 2 s (5% for the pacer's first burst). The
    // floor is a sanity bound two orders of magnitude below it, not a speed target.
    assert!((400..=42_000).contains(&sent), "20k frames/s for 2 s, sent {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent);
    assert_eq!(u64_at(&doc, "/test/rate_bps"), 20_000 * 22 * 8, "--pps is carried as the payload bit rate");
    recv.finish(Duration::from_secs(10));
}

#[test]
fn unpaced_losses_appear_in_named_counters() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa2");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    let doc = send_json(&pair, &["--engine", "xdp", "-t", "1s", "--warmup", "200ms", "-l", "22", "-b", "0"]);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    let received = u64_at(&doc, "/sum/receiver/datagrams");
    let lost = u64_at(&doc, "/sum/receiver/lost");
    assert_eq!(received + lost, sent, "sequence accounting: received + lost = sent");
    let rx = &doc["xdp"]["receiver"];
    let sock = &rx["sockets"];
    let frames_read = u64_at(rx, "/frames");
    let in_socket_counters = u64_at(sock, "/rx_ring_full") + u64_at(sock, "/rx_dropped");
    // Everything the program redirected was either read or dropped by the socket, counted.
    assert_eq!(u64_at(rx, "/steer/redirected"), frames_read + in_socket_counters, "{rx}");
    // Frames the sender's kernel completed but the receiver never read: the lost datagrams
    // plus at most the 5 FIN copies; each is in a counter (veth or the socket's).
    let gap = u64_at(&doc, "/xdp/sender/frames") - frames_read;
    assert!(lost <= gap && gap <= lost + 5, "lost {lost}, frames not read {gap}");
    assert_eq!(u64_at(rx, "/frame_len"), 64, "a 22-byte datagram is a 64-byte frame");
    recv.finish(Duration::from_secs(10));
    assert!(!xdp_attached(&pair));
}

#[test]
fn mixed_ends_xdp_sender_socket_receiver_and_back() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa3");
    // AF_XDP frames into the io_uring UDP receiver.
    let recv = pair.spawn_recv(&["--once"]);
    let mut args = vec!["--engine", "xdp"];
    args.extend_from_slice(&PACED);
    let doc = send_json(&pair, &args);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000);
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "socket receiver counted every frame");
    assert_eq!(u64_at(&doc, "/sum/receiver/lost"), 0);
    assert!(doc["xdp"]["receiver"].is_null(), "the socket receiver has no AF_XDP figures");
    recv.finish(Duration::from_secs(10));
    // io_uring datagrams into the AF_XDP receiver.
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    let mut args = vec!["-u", "--no-gso"];
    args.extend_from_slice(&PACED);
    let doc = send_json(&pair, &args);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "AF_XDP receiver counted every datagram");
    assert_eq!(u64_at(&doc, "/sum/receiver/total_bytes"), u64_at(&doc, "/sum/sender/total_bytes"));
    assert!(u64_at(&doc, "/xdp/receiver/steer/redirected") > sent);
    recv.finish(Duration::from_secs(10));
    assert!(!xdp_attached(&pair));
}

#[test]
fn ping_and_control_channel_work_while_attached() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa4");
    // Not --once, so that a second sender can be turned away while the first runs.
    let recv = pair.spawn_recv(&["--engine", "xdp"]);
    let mut send = pair.cmd(&pair.sender_ns(), bin(), &["send", "--target", RECV_ADDR, "--engine", "xdp", "-J"]);
    send.args(["-t", "3s", "--warmup", "200ms", "-b", "50M"]).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = send.spawn().expect("spawn send");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !xdp_attached(&pair) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(xdp_attached(&pair), "the program is attached during the test");
    let ping =
        pair.cmd(&pair.sender_ns(), "ping", &["-c", "3", "-i", "0.2", "-W", "1", RECV_ADDR]).output().expect("ping");
    assert!(ping.status.success(), "ping during the test: {}", String::from_utf8_lossy(&ping.stdout));
    // A second UDP test would lose its datagrams to the program: refused with the reason.
    let (second, _) = pair.send(&["--target", RECV_ADDR, "-u", "-t", "200ms"], Duration::from_secs(10));
    one_line_error(&second, 1, "UDP tests run one at a time");
    let out = finish(child, Duration::from_secs(20));
    assert!(
        out.status.success(),
        "the test over the control channel completes: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json(&out);
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), u64_at(&doc, "/sum/sender/datagrams"));
    assert!(u64_at(&doc, "/xdp/receiver/steer/passed") >= 6, "ICMP echo and TCP passed to the stack");
    assert!(!xdp_attached(&pair), "detached when the test ended, recv still running");
    recv.kill();
    assert!(!our_program_loaded());
}

#[test]
fn program_is_detached_after_sigint() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa5");
    let mut recv = pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--engine", "xdp"]);
    let child = recv.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn recv");
    pair.wait_listening("5300");
    let mut send = pair.cmd(&pair.sender_ns(), bin(), &["send", "--target", RECV_ADDR, "--engine", "xdp"]);
    let sender =
        send.args(["-t", "5s", "-b", "50M"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("send");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !xdp_attached(&pair) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(xdp_attached(&pair), "attached during the test");
    assert!(our_program_loaded(), "bpftool lists our program while it is attached");
    // `ip netns exec` execs the program: the child's pid is uringbench's.
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = finish(child, Duration::from_secs(10));
    assert!(out.status.success(), "recv ends its running test with a report on SIGINT, then exits 0");
    assert!(!xdp_attached(&pair), "no program left on the interface after SIGINT");
    assert!(!our_program_loaded(), "no program left loaded after SIGINT");
    let out = finish(sender, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "the sender reports the test the receiver stopped");
}

#[test]
fn low_memlock_is_explained_and_leaves_no_program() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa6");
    // Receiver without CAP_IPC_LOCK and 1 MiB of locked memory: the program attaches (BPF maps
    // are charged to the memory cgroup), then the 16 MiB UMEM cannot be registered. The test
    // is refused with the reason, and the program is detached again.
    let limit = "--memlock=1048576:1048576";
    let args = [
        "--inh-caps=-ipc_lock",
        "--bounding-set=-ipc_lock",
        "prlimit",
        limit,
        bin(),
        "recv",
        "--engine",
        "xdp",
        "--once",
    ];
    let child = pair
        .cmd(&pair.receiver_ns(), "setpriv", &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("recv");
    pair.wait_listening("5300");
    let mut all = vec!["--target", RECV_ADDR, "--engine", "xdp"];
    all.extend_from_slice(&PACED);
    let (out, _) = pair.send(&all, Duration::from_secs(20));
    one_line_error(&out, 1, "RLIMIT_MEMLOCK");
    assert!(String::from_utf8_lossy(&out.stderr).contains("CAP_IPC_LOCK"), "names the fix");
    let recv_out = finish(child, Duration::from_secs(10));
    assert!(!recv_out.status.success(), "the refused --once test is a failure");
    assert!(!xdp_attached(&pair), "program detached after the error");
    // The same limit on the sender: refused before the receiver is asked for anything.
    let recv = pair.spawn_recv(&["--once"]);
    let mut args = vec!["send", "--target", RECV_ADDR, "--engine", "xdp"];
    args.extend_from_slice(&PACED);
    let out = low_memlock(&pair, &pair.sender_ns(), "1048576", &args);
    one_line_error(&out, 1, "RLIMIT_MEMLOCK");
    drop(recv);
}

#[test]
fn ipv6_frames_are_counted() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa9");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--once"]);
    // 1452 bytes is the largest IPv6 datagram at MTU 1500 (40-byte header); 1470 is refused.
    let args =
        ["--target", "fd77::2", "-J", "--engine", "xdp", "-t", "1s", "--warmup", "200ms", "-l", "1400", "-b", "50M"];
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "send over IPv6: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000);
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "every IPv6 frame counted");
    assert_eq!(u64_at(&doc, "/xdp/receiver/frame_len"), 1400 + 14 + 40 + 8);
    assert_eq!(u64_at(&doc, "/xdp/receiver/malformed"), 0, "IPv6 UDP checksums verify");
    recv.finish(Duration::from_secs(10));
}

/// Runs `uringbench ARGS` in `ns` with no capabilities at all (uid 0 without them is refused
/// what an unprivileged user is refused).
fn without_capabilities(pair: &NetnsPair, ns: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--inh-caps=-all", "--bounding-set=-all", bin()];
    all.extend_from_slice(args);
    run_bounded(pair.cmd(ns, "setpriv", &all), Duration::from_secs(30)).0
}

#[test]
fn missing_privileges_name_the_capabilities() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa0");
    let recv = pair.spawn_recv(&["--once"]);
    let mut args = vec!["send", "--target", RECV_ADDR, "--engine", "xdp"];
    args.extend_from_slice(&PACED);
    one_line_error(&without_capabilities(&pair, &pair.sender_ns(), &args), 1, "CAP_NET_RAW");
    drop(recv);
    // A receiver without privileges refuses the test with the reason; the sender prints it.
    let mut recv_cmd = pair.cmd(&pair.receiver_ns(), "setpriv", &["--inh-caps=-all", "--bounding-set=-all", bin()]);
    let child = recv_cmd
        .args(["recv", "--engine", "xdp", "--once"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("recv");
    pair.wait_listening("5300");
    let (out, _) = pair.send(&["--target", RECV_ADDR, "-u", "-t", "200ms"], Duration::from_secs(20));
    one_line_error(&out, 1, "CAP_BPF");
    finish(child, Duration::from_secs(10));
    assert!(!xdp_attached(&pair));
}

#[test]
fn bad_input_is_one_line_naming_the_fix() {
    let _serial = serial();
    let pair = NetnsPair::up("uxa7");
    let _recv = pair.spawn_recv(&[]);
    let send = |args: &[&str]| {
        let mut all = vec!["--target", RECV_ADDR, "--engine", "xdp", "-t", "200ms"];
        all.extend_from_slice(args);
        pair.send(&all, Duration::from_secs(20)).0
    };
    one_line_error(&send(&["--iface", "nope0"]), 2, "no interface 'nope0'");
    one_line_error(&send(&["-P", "2"]), 2, "tx queue 1 is out of range");
    one_line_error(&send(&["-l", "1473"]), 2, "use --len 1472 or less");
    let v6 = pair.send(&["--target", "fd77::2", "--engine", "xdp", "-l", "1470"], Duration::from_secs(20)).0;
    one_line_error(&v6, 2, "use --len 1452 or less");
    one_line_error(&send(&["-l", "12"]), 2, "shorter than the 20-byte sequence header");
    one_line_error(&send(&["--reverse"]), 2, "forward only");
    let out = run_bounded(
        {
            let mut c = Command::new(bin());
            c.args(["recv", "--iface", "x0"]);
            c
        },
        Duration::from_secs(5),
    )
    .0;
    one_line_error(&out, 2, "--engine xdp");
    let out = run_bounded(
        {
            let mut c = Command::new(bin());
            c.args(["send", "-c", RECV_ADDR, "--engine", "xdp", "--iperf2"]);
            c
        },
        Duration::from_secs(5),
    )
    .0;
    one_line_error(&out, 2, "not with --iperf2");
    drop(pair);
    // Jumbo MTU: the path would take it, one UMEM frame would not.
    let jumbo = NetnsPair::up_with_mtu("uxa8", 9000);
    let _recv = jumbo.spawn_recv(&[]);
    let (out, _) = jumbo.send(&["--target", RECV_ADDR, "--engine", "xdp", "-l", "5000"], Duration::from_secs(20));
    one_line_error(&out, 2, "UMEM frame");
}

#[test]
fn a_spinning_receiver_busy_polls_its_sockets_and_says_so() {
    let _serial = serial();
    let pair = NetnsPair::up("uxbp");
    let recv = pair.spawn_recv(&["--engine", "xdp", "--busy-poll", "on", "--cpus", "1", "--once"]);
    let mut args = vec!["--engine", "xdp", "--cpus", "0"];
    args.extend_from_slice(&PACED);
    let doc = send_json(&pair, &args);
    let sent = u64_at(&doc, "/sum/sender/datagrams");
    assert!(sent > 3000, "about 5000 datagrams expected, got {sent}");
    assert_eq!(u64_at(&doc, "/sum/receiver/datagrams"), sent, "every frame counted: {}", doc["receiver"]);
    let notes = doc["xdp"]["receiver"]["notes"].to_string();
    assert!(notes.contains("busy polling: SO_PREFER_BUSY_POLL"), "the kernel took the options: {notes}");
    let out = recv.finish(Duration::from_secs(10));
    assert!(out.status.success(), "recv --once: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!xdp_attached(&pair), "program detached after the test");
}
