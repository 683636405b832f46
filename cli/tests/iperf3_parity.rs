//! iperf3 parity (issue 41) against the real iperf3 (`/usr/bin/iperf3`, Debian's 3.12) between
//! two network namespaces: what a stock `iperf3 -s` gives its clients, `recv --iperf3` gives
//! (`--get-server-output`, burst, `--dont-fragment`), and what it does not serve is refused
//! with iperf3's own error, whose text the client prints; `send --iperf3`'s warm-up, sent as
//! iperf3's omit, never calls the server's post-omit count a total. Figures are checked against
//! iperf3's own report. Pairs are named `ubp*`; every process is bounded.

mod common;

use common::*;
use std::process::Output;
use std::time::Duration;

const PORT: &str = "5201";

/// What `iperf3 -J` printed, parsed.
fn iperf3_json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `iperf3 -c 10.77.0.2 ARGS` from the sender namespace.
fn iperf3_client(pair: &NetnsPair, args: &[&str]) -> Output {
    let args = [&["-c", "10.77.0.2", "-p", PORT][..], args].concat();
    run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &args), Duration::from_secs(20)).0
}

/// The number just before the first `marker` in `line`.
fn number_before(line: &str, marker: &str) -> u64 {
    line.split(marker).next().and_then(|h| h.rsplit(' ').next()).and_then(|b| b.parse().ok()).expect(marker)
}

/// `send --iperf3` with its default 1 s warm-up, sent as iperf3's omit: the server leaves that
/// second out of its totals (its own JSON marks the interval omitted), so our document says
/// the far side's `total_bytes` start after the omit, and that count is the server's own.
#[test]
fn parity_send_iperf3_warmup_total_is_labelled_after_the_omit() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubpa") else { return };
    let server = pair.iperf3_server(PORT, &["-1", "-J"]);
    let (out, _) = pair.send(&["--iperf3", "-c", "10.77.0.2", "-t", "1", "-J"], Duration::from_secs(30));
    let server = finish(server, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 failed: {}", String::from_utf8_lossy(&out.stderr));
    let ours = json(&out);
    let theirs = iperf3_json(&server);
    assert_eq!(theirs["intervals"][0]["streams"][0]["omitted"], true, "iperf3 -s omitted its first second");
    assert_eq!(ours["sum"]["peer_totals_after_omit_s"], 1, "the far totals are labelled: {}", ours["sum"]);
    let counted = u64_at(&theirs, "/end/sum_received/bytes");
    assert_eq!(u64_at(&ours, "/sum/receiver/total_bytes"), counted, "the labelled figure is the server's own count");
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    assert!(sent > counted && counted > 100_000, "we sent {sent}, more than the {counted} it counted after its omit");
}

/// `recv --iperf3` against iperf3 3.12 clients: `--get-server-output` gets our test line back
/// (TCP: its byte count is exactly what the client says it sent), `-u -b RATE/COUNT
/// --dont-fragment` is served and accounted, `-R -u --dont-fragment` sends with DF, `-R -u -b
/// RATE/COUNT` is sent in bursts; what we do
/// not serve is refused with iperf3's own error, which the client prints; the parameter
/// message of a 3.21 `iperf3 -c -m` (captured) is accepted: CREATE_STREAMS, where the host
/// has MPTCP (cli/tests/mptcp.rs runs such tests).
#[test]
fn parity_recv_iperf3_server_output_burst_df_and_refusals() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubpb") else { return };
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT]);

    let out = iperf3_client(&pair, &["-t", "1", "--get-server-output", "-J"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    let line = theirs["server_output_text"].as_str().unwrap_or_else(|| panic!("no server output: {theirs}"));
    assert!(line.contains("iperf3 TCP test from 10.77.0.1") && !line.contains("incomplete"), "{line}");
    let sent = u64_at(&theirs, "/end/sum_sent/bytes");
    assert!(sent > 1_000_000, "real traffic: {sent}");
    assert_eq!(number_before(line, " bytes in "), sent, "our line in its JSON counts every byte it sent");

    let out = iperf3_client(&pair, &["-t", "1", "-u", "-b", "50M/10", "--dont-fragment", "--get-server-output", "-J"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    let line = theirs["server_output_text"].as_str().unwrap_or_default();
    assert!(line.contains("in bursts of 10 writes with don't-fragment"), "{line}");
    let (got, sent) = (number_before(line, " bytes in "), u64_at(&theirs, "/end/sum/bytes"));
    assert!(got <= sent && got * 100 >= sent * 95, "we counted {got} of the {sent} bytes it sent in bursts");

    let out = iperf3_client(&pair, &["-t", "1", "-R", "-u", "-b", "20M", "--dont-fragment", "-J"]);
    assert!(out.status.success(), "-R -u --dont-fragment is served: {}", String::from_utf8_lossy(&out.stdout));
    assert!(u64_at(&iperf3_json(&out), "/end/sum/bytes") > 100_000, "the client received our datagrams");

    // Our sending in bursts (cli/tests/iperf3_burst.rs holds its rate and shape).
    let out = iperf3_client(&pair, &["-t", "1", "-R", "-u", "-b", "10M/5", "-J"]);
    assert!(out.status.success(), "-R -u -b RATE/N is served: {}", String::from_utf8_lossy(&out.stdout));
    assert!(u64_at(&iperf3_json(&out), "/end/sum/bytes") > 100_000, "the client received our bursts");

    let (args, says) = (&["-t", "1", "-R", "-L", "5"][..], "unable to set IPv6 flow label");
    let out = iperf3_client(&pair, args);
    let printed = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && printed.contains(says), "{args:?}: iperf3 prints '{says}': {printed}");

    // 3.12 has no -m: the parameter message a 3.21 `iperf3 -c -m -t 1` sent (its `-d` output).
    let script = format!(
        r#"{PY_IPERF3_STATE}
import socket, struct
s = socket.create_connection(("10.77.0.2", 5201), timeout=5)
s.sendall(b"b" * 36 + b"\0")
state = s.recv(1)
body = b'{{"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":1,"mptcp":true,"len":131072,"pacing_timer":1000,"client_version":"3.21+"}}'
s.sendall(struct.pack(">I", len(body)) + body)
print("state", state[0], "reply", read_state(s))
"#
    );
    let (py, _) = run_bounded(pair.cmd(&pair.sender_ns(), "python3", &["-c", &script]), Duration::from_secs(20));
    let py_out = String::from_utf8_lossy(&py.stdout).to_string();
    let mptcp = std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|v| v.trim() == "1");
    // Without MPTCP: iperf3's SERVER_ERROR 202 (the stream listener) with ENOPROTOOPT (92).
    let answer = if mptcp { "state 9 reply [10]" } else { "state 9 reply [254, 0, 0, 0, 202, 0, 0, 0, 92]" };
    assert!(py_out.contains(answer), "a 3.21 -m client's parameters: {answer}: {py_out}");

    let log = recv.kill();
    let log = String::from_utf8_lossy(&log.stdout).to_string();
    assert!(log.contains("; sent ") && log.contains(" with don't-fragment, client received"), "{log}");
    assert!(log.contains(" in bursts of 5 datagrams, client received"), "{log}");
}

/// `recv --iperf3 -J` against iperf3 3.12 clients with `--get-server-output`: as `iperf3 -s
/// -J` does, our output goes back as `server_output_json`, iperf3's server document of what
/// our loops measured. Its figures are held to the client's own: the end's bytes are what the
/// client sent (TCP), the datagrams it did not call lost (UDP, the count the client shows as
/// its receiver's), what it shows as its sender's (`-R`); its data connections are the
/// client's own ports; intervals sum their streams. A text client prints it as iperf3 prints
/// a server's JSON. (Without -J the line goes back as `server_output_text`: the test above.)
#[test]
fn parity_recv_iperf3_json_server_output() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubpc") else { return };
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT, "-J"]);
    let now_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;

    let before = now_ms();
    let out = iperf3_client(&pair, &["-t", "2", "-P", "2", "--get-server-output", "-J"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    assert!(theirs.get("server_output_text").is_none(), "JSON, not text: {theirs}");
    let doc = &theirs["server_output_json"];
    let sent = u64_at(&theirs, "/end/sum_sent/bytes");
    assert!(sent > 1_000_000, "real traffic: {sent}");
    assert_eq!(u64_at(doc, "/end/sum_received/bytes"), sent, "our document counts every byte it sent: {doc}");
    let streams = doc["end"]["streams"].as_array().expect("end streams");
    let per_stream: Vec<u64> = streams.iter().map(|s| u64_at(s, "/receiver/bytes")).collect();
    assert_eq!((per_stream.len(), per_stream.iter().sum::<u64>()), (2, sent), "{streams:?}");
    let mut client_ports: Vec<u64> =
        theirs["start"]["connected"].as_array().unwrap().iter().map(|c| u64_at(c, "/local_port")).collect();
    let mut ours: Vec<u64> =
        doc["start"]["connected"].as_array().expect("connected").iter().map(|c| u64_at(c, "/remote_port")).collect();
    client_ports.sort_unstable();
    ours.sort_unstable();
    assert_eq!(ours, client_ports, "our data connections are the client's");
    let ms = u64_at(doc, "/start/timestamp/timemillisecs");
    assert!(ms >= before.saturating_sub(1000) && ms <= now_ms(), "started at {ms}, the test ran from {before}");
    assert_eq!(u64_at(doc, "/start/timestamp/timesecs"), ms / 1000);
    assert_eq!(u64_at(doc, "/start/test_start/num_streams"), 2);
    // One a second, as iperf3 -s reports, over our window (the client's 2 s less 250 ms).
    let intervals = doc["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 2, "{doc}");
    assert!((f64_at(&intervals[0], "/sum/seconds") - 1.0).abs() < 0.01, "{doc}");
    let mut in_intervals = 0;
    for iv in intervals {
        let streams: u64 = iv["streams"].as_array().unwrap().iter().map(|s| u64_at(s, "/bytes")).sum();
        assert_eq!(u64_at(iv, "/sum/bytes"), streams, "an interval's sum is its streams': {iv}");
        in_intervals += streams;
    }
    assert!(in_intervals > 0 && in_intervals <= sent, "the intervals hold {in_intervals} of {sent} bytes");

    let out = iperf3_client(&pair, &["-t", "2", "-u", "-b", "50M", "-l", "1400", "--get-server-output", "-J"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    let doc = &theirs["server_output_json"];
    let counted = u64_at(doc, "/end/sum_received/bytes");
    let (packets, lost) = (u64_at(doc, "/end/sum_received/packets"), u64_at(doc, "/end/sum_received/lost_packets"));
    assert_eq!(counted, u64_at(&theirs, "/end/sum_received/bytes"), "the count the client shows as its receiver's");
    assert_eq!(counted, (packets - lost) * 1400, "every datagram not called lost was counted: {doc}");
    let client_sent = u64_at(&theirs, "/end/sum_sent/bytes");
    assert!(client_sent / 1400 >= packets && client_sent / 1400 - packets <= 64, "{client_sent} sent, {packets} seen");
    assert!(doc["end"]["streams"][0]["udp"]["jitter_ms"].is_number(), "{doc}");
    assert!(doc["intervals"][0]["sum"]["lost_packets"].is_number(), "{doc}");

    let out = iperf3_client(&pair, &["-t", "2", "-R", "--get-server-output", "-J"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let theirs = iperf3_json(&out);
    let doc = &theirs["server_output_json"];
    let ours_sent = u64_at(doc, "/end/sum_sent/bytes");
    assert_eq!(ours_sent, u64_at(&theirs, "/end/sum_sent/bytes"), "what the client shows as its sender's: {doc}");
    let received = u64_at(&theirs, "/end/sum_received/bytes");
    assert!(received > 1_000_000 && received <= ours_sent, "it received {received} of our {ours_sent}");
    let stream = &doc["end"]["streams"][0]["sender"];
    assert!(stream["reorder"].is_u64() && stream["retransmits"].is_u64(), "3.20's reorder from TCP_INFO: {stream}");
    assert!(doc["intervals"][0]["streams"][0]["snd_cwnd"].as_u64() > Some(0), "{doc}");
    assert!(doc["end"].get("sum_received").is_none(), "no zeros for the direction we did not carry: {doc}");

    let out = iperf3_client(&pair, &["-t", "1", "--get-server-output"]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && printed.contains("Server JSON output:"), "{printed}");
    drop(recv.kill());
}
