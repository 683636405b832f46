//! The UDP loops over loopback: our sender against our receiver (GSO and GRO on and off,
//! the FIN answered with an iperf2 report, forged FINs), and each of them against an
//! unmodified iperf 2.1.8.

use super::recv::{
    self as udp_recv, prepare_socket, set_int_opt, UdpRecvConfig, UdpRecvFlow, UdpRecvResult, GRO_PAYLOAD,
};
use super::send::{self as udp_send, FinConfig, SendPath, UdpSendConfig, UdpSendFlow};
use crate::metrics::measure::QueueCounters;
use crate::uring::ring::{RingPaths, WaitMode, WakeBatch};
use crate::wire::udp_payload::{self as payload, WireTime};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Makes a receiving socket with a receive buffer big enough for the whole test; returns
/// whether the forced size was granted (root), which lets the test demand zero loss.
fn receiver_socket() -> (UdpSocket, bool) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    let forced = set_int_opt(&socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 256 << 20).is_ok();
    if !forced {
        let _ = set_int_opt(&socket, libc::SOL_SOCKET, libc::SO_RCVBUF, 256 << 20);
    }
    (socket, forced)
}

struct Outcome {
    sent: udp_send::UdpSendResult,
    recv: UdpRecvResult,
    secs: f64,
}

fn loopback(count: u64, len: u32, gso: bool, gro: bool, answer_fin: bool) -> (Outcome, bool) {
    let (rx, forced) = receiver_socket();
    prepare_socket(&rx, gro, true).expect("GRO and timestamps on loopback");
    let target = rx.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let rcfg = UdpRecvConfig {
        wait: WaitMode::Sleep,
        ring: RingPaths::default(),
        batch: WakeBatch { want: 1, max_delay_us: 0 },
        gro,
        buf_count: if gro { 64 } else { 1024 },
        max_payload: UdpRecvConfig::payload_room(gro, len),
        kernel_timestamps: true,
        one_way_delay: true,
        answer_fin,
        fin_linger: Duration::from_millis(20),
        halt: stop.clone(),
        deadline: Instant::now() + Duration::from_secs(20),
    };
    let receiver = std::thread::spawn(move || {
        let counters = QueueCounters::new(1);
        udp_recv::run(vec![UdpRecvFlow { socket: rx, queue: 0, live: None }], &counters, &rcfg)
            .map(|r| (r, counters.snapshot()[0]))
    });
    let tx = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
    tx.connect(target).expect("connect");
    let scfg = UdpSendConfig {
        wait: WaitMode::Sleep,
        ring: RingPaths::default(),
        batch: WakeBatch { want: 1, max_delay_us: 0 },
        len,
        gso,
        inflight: if gso { 8 } else { 32 },
        deadline: Instant::now() + Duration::from_secs(15),
        halt: None,
        rate_bps: 0,
        burst: 0,
        max_datagrams: count,
        drain_limit: Duration::from_secs(1),
        fin: Some(if answer_fin { FinConfig::iperf2() } else { FinConfig::default() }),
        refused: None,
    };
    let t0 = Instant::now();
    let sent =
        udp_send::run(vec![UdpSendFlow { socket: tx, queue: 0 }], &QueueCounters::new(1), &scfg).expect("sender runs");
    let secs = t0.elapsed().as_secs_f64();
    let (recv, counted) = receiver.join().expect("receiver thread").expect("receiver runs");
    stop.store(true, Ordering::Relaxed);
    assert_eq!(counted, recv.flows[0].stats.bytes, "queue counter = bytes of accounted datagrams");
    (Outcome { sent, recv, secs }, forced)
}

fn check(name: &str, o: &Outcome, forced: bool, count: u64, len: u32) {
    let s = &o.sent.flows[0];
    let r = &o.recv.flows[0];
    eprintln!(
        "{name}: sent {} datagrams in {:.3} s ({:.0}/s) over {} sends [{}]; received {} lost {} ooo {} dup {} \
         jitter {:.1} us; completions {} coalesced {}",
        s.datagrams,
        o.secs,
        s.datagrams as f64 / o.secs,
        o.sent.sends,
        o.sent.path.describe(),
        r.stats.received,
        r.stats.lost,
        r.stats.out_of_order,
        r.stats.duplicates,
        r.stats.jitter_us,
        o.recv.completions,
        o.recv.coalesced,
    );
    assert!(s.error.is_none() && r.error.is_none(), "{name}: no errors: {:?} {:?}", s.error, r.error);
    assert_eq!(s.datagrams, count, "{name}: every datagram accepted by the kernel");
    assert_eq!(s.next_seq, count + 1, "{name}: FIN carries last + 1");
    assert!(r.stats.fin, "{name}: FIN seen");
    assert_eq!(r.stats.expected, count, "{name}: receiver knows how many were sent (from the FIN)");
    assert_eq!(r.stats.received + r.stats.lost, s.datagrams, "{name}: received + lost == sent");
    assert_eq!(r.stats.duplicates, 0, "{name}: no duplicates on loopback");
    assert_eq!(r.foreign + r.strangers, 0, "{name}: nothing undecodable");
    if forced {
        assert_eq!(r.stats.lost, 0, "{name}: no loss on loopback with a {} MiB receive buffer", 256);
        assert_eq!(r.stats.bytes, count * u64::from(len), "{name}: every byte");
    }
    assert_eq!(o.recv.truncated, 0, "{name}: buffers large enough");
}

const COUNT: u64 = 20_000;
const LEN: u32 = 1470;

#[test]
fn udp_loopback_gso_sender_plain_receiver() {
    let (o, forced) = loopback(COUNT, LEN, true, false, false);
    assert_eq!(o.sent.path, SendPath::Gso { segments: 44 }, "GSO path ran");
    assert!(o.sent.sends < COUNT / 10, "GSO batches datagrams: {} sends", o.sent.sends);
    check("gso->plain", &o, forced, COUNT, LEN);
}

#[test]
fn udp_loopback_per_datagram_both_ends() {
    let (o, forced) = loopback(COUNT, LEN, false, false, false);
    assert_eq!(o.sent.path, SendPath::PerDatagram);
    assert_eq!(o.sent.sends, COUNT, "one send per datagram");
    assert_eq!(o.recv.coalesced, 0, "no GRO: one datagram per completion");
    check("per-datagram", &o, forced, COUNT, LEN);
}

#[test]
fn udp_loopback_gso_sender_gro_receiver() {
    let (o, forced) = loopback(COUNT, LEN, true, true, false);
    assert!(o.recv.gro, "GRO enabled on the socket");
    assert!(o.recv.coalesced > 0, "loopback delivers GSO sends whole: GRO completions carry many datagrams");
    assert!(o.recv.completions < COUNT / 5, "{} completions for {COUNT} datagrams", o.recv.completions);
    check("gso->gro", &o, forced, COUNT, LEN);
    let delay = o.recv.flows[0].stats.delay.expect("one-way delay kept (same host, same clock)");
    assert!(delay.min_us >= 0.0 && delay.max_us < 5e6, "delay on one host is small and non-negative: {delay:?}");
}

/// A source that never sent data and sends ten FINs (forged, maybe in a victim's name)
/// gets one report, not one per FIN as a flow that carried data does.
#[test]
fn fins_without_data_get_one_report() {
    let (rx, _) = receiver_socket();
    let target = rx.local_addr().unwrap();
    let rcfg = UdpRecvConfig {
        wait: WaitMode::Sleep,
        ring: RingPaths::default(),
        batch: WakeBatch { want: 1, max_delay_us: 0 },
        gro: false,
        buf_count: 64,
        max_payload: UdpRecvConfig::payload_room(false, 1470),
        kernel_timestamps: false,
        one_way_delay: false,
        answer_fin: true,
        fin_linger: Duration::from_millis(300),
        halt: Arc::new(AtomicBool::new(false)),
        deadline: Instant::now() + Duration::from_secs(5),
    };
    let receiver = std::thread::spawn(move || {
        udp_recv::run(vec![UdpRecvFlow { socket: rx, queue: 0, live: None }], &QueueCounters::new(1), &rcfg)
    });
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(target).unwrap();
    tx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut fin = [0u8; 64];
    payload::encode_fin(&mut fin, 1000, WireTime::now()).unwrap();
    let mut reports = 0;
    for _ in 0..10 {
        tx.send(&fin).unwrap();
        let mut buf = [0u8; 512];
        while tx.recv(&mut buf).is_ok() {
            reports += 1;
        }
    }
    let done = receiver.join().unwrap().unwrap();
    assert_eq!(done.flows[0].reports_sent, 1, "the receiver's own count");
    assert_eq!(reports, 1, "reports that arrived for ten FINs without data");
}

#[test]
fn udp_loopback_fin_answered_with_iperf2_report() {
    let (o, forced) = loopback(2_000, 1000, true, true, true);
    check("report", &o, forced, 2_000, 1000);
    let report = o.sent.flows[0].report.expect("the sender got a server report back");
    let r = &o.recv.flows[0];
    assert!(r.reports_sent >= 1, "receiver answered the FIN");
    assert_eq!(report.datagrams, 2_000, "report: datagrams = highest sequence number sent");
    assert_eq!(report.lost, r.stats.lost);
    assert_eq!(report.bytes, r.stats.bytes);
    assert!(o.sent.flows[0].fins >= 1 && o.sent.flows[0].fins < 50, "FINs bounded: {}", o.sent.flows[0].fins);
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port()).expect("a free port")
}

fn iperf_present() -> bool {
    std::process::Command::new("iperf").arg("-v").output().is_ok()
}

/// Kills and reaps a child we started (by its own handle, nothing broader).
fn finish(mut child: std::process::Child) -> String {
    let _ = child.kill();
    let out = child.wait_with_output().expect("child output");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Our sender against an unmodified `iperf -s -u` 2.1.8: it must account our datagrams and
/// send back a report we decode. Needs the `iperf` binary (scripts/install-deps.sh --test
/// installs it); it runs with the other unit tests and fails, not skips, without it.
#[test]
fn iperf2_server_accounts_our_datagrams() {
    assert!(iperf_present(), "iperf (2.1.8) is not installed: apt-get install iperf (.ci/run does)");
    let port = free_udp_port();
    let server = std::process::Command::new("timeout")
        .args(["10", "iperf", "-s", "-u", "-p", &port.to_string(), "-t", "6", "-l", "2000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start iperf -s -u");
    std::thread::sleep(Duration::from_millis(500));
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(("127.0.0.1", port)).unwrap();
    let count = 5_000;
    let cfg = UdpSendConfig {
        wait: WaitMode::Sleep,
        ring: RingPaths::default(),
        batch: WakeBatch { want: 1, max_delay_us: 0 },
        len: 1470,
        gso: true,
        inflight: 4,
        deadline: Instant::now() + Duration::from_secs(5),
        halt: None,
        rate_bps: 100_000_000,
        burst: 0,
        max_datagrams: count,
        drain_limit: Duration::from_secs(1),
        fin: Some(FinConfig::iperf2()),
        refused: None,
    };
    let sent = udp_send::run(vec![UdpSendFlow { socket: tx, queue: 0 }], &QueueCounters::new(1), &cfg).unwrap();
    let text = finish(server);
    let flow = &sent.flows[0];
    eprintln!("iperf -s said:\n{text}\nour sender: {flow:?}");
    let report = flow.report.expect("iperf -s answered our FIN with its report");
    assert_eq!(flow.datagrams, count);
    assert!(
        report.datagrams + 1 >= count && report.datagrams <= count + 1,
        "iperf2 counts our datagrams by sequence number: {report:?}"
    );
    assert!(report.lost + report.out_of_order <= count / 10, "little loss at 100 Mbit/s: {report:?}");
    assert!(report.bytes >= (count - report.lost - 1) * 1470, "bytes of what arrived: {report:?}");
}

/// An unmodified `iperf -c -u` 2.1.8 against our receiver: we account its datagrams and
/// its client prints our report. Needs the `iperf` binary (scripts/install-deps.sh --test
/// installs it); it runs with the other unit tests and fails, not skips, without it.
#[test]
fn iperf2_client_prints_our_report() {
    assert!(iperf_present(), "iperf (2.1.8) is not installed: apt-get install iperf (.ci/run does)");
    let (rx, _) = receiver_socket();
    prepare_socket(&rx, true, true).unwrap();
    let port = rx.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let rcfg = UdpRecvConfig {
        wait: WaitMode::Sleep,
        ring: RingPaths::default(),
        batch: WakeBatch { want: 1, max_delay_us: 0 },
        gro: true,
        buf_count: 64,
        max_payload: GRO_PAYLOAD,
        kernel_timestamps: true,
        one_way_delay: false,
        answer_fin: true,
        fin_linger: crate::wire::iperf2::SERVER_ACKFIN_SILENCE,
        halt: stop,
        deadline: Instant::now() + Duration::from_secs(8),
    };
    let receiver = std::thread::spawn(move || {
        udp_recv::run(vec![UdpRecvFlow { socket: rx, queue: 0, live: None }], &QueueCounters::new(1), &rcfg).unwrap()
    });
    let client = std::process::Command::new("timeout")
        .args(["8", "iperf", "-c", "127.0.0.1", "-u", "-p", &port.to_string(), "-t", "1", "-b", "20M"])
        .output()
        .expect("run iperf -c -u");
    let text = String::from_utf8_lossy(&client.stdout).to_string() + &String::from_utf8_lossy(&client.stderr);
    let recv = receiver.join().unwrap();
    let flow = &recv.flows[0];
    eprintln!("iperf -c said:\n{text}\nour receiver: {flow:?} {recv:?}");
    let sent: u64 = text
        .lines()
        .find_map(|l| l.split("Sent ").nth(1)?.split_whitespace().next()?.parse().ok())
        .expect("client prints how many it sent");
    assert!(flow.stats.fin, "the client's FIN arrived");
    // Captured on loopback: the client's "Sent N" is its data datagrams + 2 (ids 1..=N-2,
    // then FIN -(N-1)); an iperf2 server would print N-1 as total (it counts the FIN).
    assert_eq!(flow.stats.expected + 2, sent, "we know how many data datagrams it sent");
    assert_eq!(flow.stats.received + flow.stats.lost, flow.stats.expected, "accounting identity");
    assert!(flow.reports_sent >= 1, "we answered");
    assert!(text.contains("Server Report"), "the client printed our report");
    assert!(!text.contains("did not receive ack"), "the client got the report in time");
    let expected_total = format!("{}/{}", flow.stats.lost, flow.stats.expected);
    assert!(text.contains(&expected_total), "client shows our lost/total {expected_total}");
}
