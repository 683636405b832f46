//! `recv --iperf3` on a public address: what a stranger cannot make it do. Attacks come from the
//! sender namespace (which also holds a control connection) and name a third namespace, joined
//! to the receiver only, as their victim; the real client is Debian's iperf3. Every spawned
//! process is bounded; pairs are named `ub3h*`.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

const PORT: &str = "5201";

/// A third namespace `NAME-c` joined to the receiver's by a veth of its own (10.78.0.3 there,
/// 10.78.0.2 on the receiver), without IPv6 (so nothing but what the receiver sends arrives);
/// removed when dropped.
struct Victim {
    ns: String,
    iface: String,
}

impl Victim {
    fn up(pair: &NetnsPair) -> Self {
        let (ns, iface, peer) = (format!("{}-c", pair.name), format!("{}c0", pair.name), format!("{}b1", pair.name));
        let b = pair.receiver_ns();
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let script = format!(
            "set -e; ip netns add {ns}; ip -n {ns} link add {iface} type veth peer name {peer} netns {b}; \
             ip netns exec {ns} sysctl -qw net.ipv6.conf.all.disable_ipv6=1; \
             ip netns exec {b} sysctl -qw net.ipv6.conf.{peer}.disable_ipv6=1; \
             ip -n {ns} addr add 10.78.0.3/24 dev {iface}; ip -n {b} addr add 10.78.0.2/24 dev {peer}; \
             ip -n {ns} link set lo up; ip -n {ns} link set {iface} up; ip -n {b} link set {peer} up; \
             ip netns exec {b} sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.{rb}.rp_filter=0",
            rb = pair.receiver_if()
        );
        let out = Command::new("bash").args(["-c", &script]).output().expect("bash");
        assert!(out.status.success(), "third namespace: {}", String::from_utf8_lossy(&out.stderr));
        Self { ns, iface }
    }

    /// Packets its interface received, read from its own counter.
    fn rx_packets(&self) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/rx_packets", self.iface);
        let out = Command::new("ip").args(["netns", "exec", &self.ns, "cat", &path]).output().expect("cat");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("numeric counter")
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

/// Python run in the sender namespace: a control connection asking for a UDP `-R` test at
/// 200 Mbit/s for 10 s, five connect datagrams forged from 10.78.0.3, then its own; once the
/// stream is answered its UDP socket closes (ICMP port unreachable from then on). Prints the
/// connect reply, the packets its interface received in the second after the first 3 s past
/// the close, when the stream stopped arriving (the end of the last 100 ms after the close in
/// which more than 20 packets came: the stream is ~100 in 100 ms, its datagrams batched by
/// GSO), and the packets of the 0.3 s before the close.
fn forged_connect(iface: &str) -> String {
    format!(
        r#"
import json, socket, struct, time
S, P = "10.77.0.2", 5201
rx = lambda: int(open("/sys/class/net/{iface}/statistics/rx_packets").read())
c = socket.create_connection((S, P), timeout=5)
c.sendall(b"abcdefghijklmnopqrstuvwxyz234567abcd\0")
assert c.recv(1) == bytes([9]), "PARAM_EXCHANGE"
p = json.dumps({{"udp": True, "reverse": True, "time": 10, "parallel": 1, "len": 1400,
                "bandwidth": 200000000, "client_version": "3.12"}}).encode()
c.sendall(struct.pack(">I", len(p)) + p)
assert c.recv(1) == bytes([10]), "CREATE_STREAMS"
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for i in range(5):
    udp = struct.pack(">HHHH", 40000, P, 12, 0) + b"9876"
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i + 1, 0, 64, 17, 0,
                     socket.inet_aton("10.78.0.3"), socket.inet_aton(S))
    raw.sendto(ip + udp, (S, 0))
    time.sleep(0.05)
time.sleep(0.3)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(3)
u.sendto(b"9876", (S, P))
reply = u.recvfrom(64)[0]
running = rx()
time.sleep(0.3)
running = rx() - running
u.close()
closed = time.monotonic()
stream_seen, prev = 0.0, rx()
while time.monotonic() - closed < 3.0:
    time.sleep(0.1)
    now = rx()
    if now - prev > 20:
        stream_seen = time.monotonic() - closed
    prev = now
before = rx()
time.sleep(1.0)
print(reply.decode(), rx() - before, "%.3f" % stream_seen, running)
c.close()
"#
    )
}

/// A forged connect datagram does not make `recv --iperf3` send a `-R` UDP stream to the
/// address it names: the third namespace receives nothing (its interface's counter), the
/// receiver says it ignored it, naming the forged source, and the real client's stream is
/// served; once the client's port answers ICMP port unreachable, our sending stops within
/// 1 s (the test asks for 10).
#[test]
fn a_forged_connect_datagram_gets_no_udp_stream() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3hf") else { return };
    let victim = Victim::up(&pair);
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT]);
    let before = victim.rx_packets();
    let mut attack = pair.cmd(&pair.sender_ns(), "python3", &["-c", &forged_connect(&format!("{}a0", pair.name))]);
    attack.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let (attack, _) = run_bounded(attack, Duration::from_secs(20));
    assert!(attack.status.success(), "attack script: {}", String::from_utf8_lossy(&attack.stderr));
    let said = String::from_utf8_lossy(&attack.stdout).to_string();
    let mut words = said.split_whitespace();
    assert_eq!(words.next(), Some("6789"), "the client's own stream was answered: {said}");
    let late: u64 = words.next().and_then(|w| w.parse().ok()).expect("packet count");
    let stopped: f64 = words.next().and_then(|w| w.parse().ok()).expect("stop time");
    let running: u64 = words.next().and_then(|w| w.parse().ok()).expect("packets before the close");
    assert!(running > 150, "the stream ran before the close ({running} packets in 0.3 s)");
    // 200 Mbit/s of 1,400-byte datagrams is ~18,000 a second: what still arrives 3 s after
    // the close is the kernel's few, not the stream; and the stream ended within 1 s.
    assert!(late < 200, "{late} packets arrived 3-4 s after the client's port closed: the sending went on");
    assert!(stopped <= 1.0, "the stream still arrived {stopped:.3} s after the client's port closed (at most 1 s)");
    eprintln!("the stream stopped {stopped:.3} s after the client's port closed");
    let client =
        pair.cmd(&pair.sender_ns(), "iperf3", &["-c", RECV_ADDR, "-p", PORT, "-u", "-R", "-b", "10M", "-t", "1", "-J"]);
    let (client, _) = run_bounded(client, Duration::from_secs(30));
    assert_eq!(victim.rx_packets() - before, 0, "the forged source's namespace received nothing");
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(client.status.success(), "the real client's test: {}\n{log}", String::from_utf8_lossy(&client.stdout));
    let report: serde_json::Value = serde_json::from_slice(&client.stdout).expect("iperf3 -J");
    assert!(u64_at(&report, "/end/sum/bytes") > 500_000, "the real client received its stream: {report}");
    assert!(
        log.lines().any(|l| l.contains("10.78.0.3") && l.contains("not from the test's client 10.77.0.1")),
        "the forged datagram is said, with its source: {log}"
    );
    assert!(log.contains("data with 10.77.0.1:"), "test lines name the data's destination: {log}");
}

/// `--max-rate 10M`: a TCP `-R` test asking for no limit is sent at 10 Mbit/s by the client's
/// own count; a UDP `-R -b 300M` and a TCP test the client sends without `-b` are refused at
/// start. `recv --iperf2` (which never sends) refuses the option when it starts.
#[test]
fn max_rate_caps_or_refuses_iperf3_and_iperf2_refuses_it() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ub3hr") else { return };
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT, "--max-rate", "10M"]);
    let iperf3 = |args: &[&str]| {
        let mut all = vec!["-c", RECV_ADDR, "-p", PORT, "-J"];
        all.extend_from_slice(args);
        run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &all), Duration::from_secs(30)).0
    };
    let reverse = iperf3(&["-R", "-t", "2"]);
    let udp_fast = iperf3(&["-u", "-R", "-b", "300M", "-t", "1"]);
    let unpaced = iperf3(&["-t", "1"]);
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(reverse.status.success(), "TCP -R: {}\n{log}", String::from_utf8_lossy(&reverse.stdout));
    let report: serde_json::Value = serde_json::from_slice(&reverse.stdout).expect("iperf3 -J");
    let rate = f64_at(&report, "/end/sum_received/bits_per_second");
    assert!(rate > 5e6 && rate <= 10.5e6, "TCP -R by the client's count: {rate} bit/s, want <= 10 Mbit/s\n{log}");
    // iperf3 -J says a refusal in its document's "error" (its exit status varies by version),
    // in iperf3's own words for the error number we answer with.
    for (what, out) in [("UDP -R -b 300M", &udp_fast), ("a TCP test without -b", &unpaced)] {
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J");
        let error = doc["error"].as_str().unwrap_or_default();
        assert!(error.contains("larger than server limit"), "{what} is refused at start: {doc}");
    }
    // One refusal line per address per window: the second is counted, not written.
    assert_eq!(log.matches("(recv --max-rate)").count(), 1, "the refusal says the limit: {log}");
    let iperf2 =
        pair.cmd(&pair.receiver_ns(), bin(), &["recv", "--iperf2", "--port", "5301", "--max-rate", "10M"]).output();
    one_line_error(&iperf2.expect("recv --iperf2"), 2, "--max-rate is not available with --iperf2");
}
