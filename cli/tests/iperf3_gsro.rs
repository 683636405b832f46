//! iperf3 3.20/3.21 parity (issue 41) against Debian's iperf3 3.12 between two network
//! namespaces: `recv --iperf3`'s test line says whether our UDP loops ran with GRO and GSO;
//! `send --iperf3 --gsro --get-server-output` sends 3.21's GSO/GRO keys, which a 3.12 server
//! ignores, and brings the server's own JSON back, checked against what that server printed
//! itself. (The keys a 3.21 client and server write are checked in the engine's unit tests,
//! from messages captured from a 3.21 build.) Pairs are named `ubg*`; every process is bounded.

mod common;

use common::*;
use std::process::Output;
use std::time::Duration;

const PORT: &str = "5201";

/// `iperf3 -c 10.77.0.2 ARGS -J` from the sender namespace, its document.
fn iperf3_client_json(pair: &NetnsPair, args: &[&str]) -> serde_json::Value {
    let args = [&["-c", "10.77.0.2", "-p", PORT, "-J"][..], args].concat();
    let out: Output = run_bounded(pair.cmd(&pair.sender_ns(), "iperf3", &args), Duration::from_secs(20)).0;
    assert!(out.status.success(), "iperf3 {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_slice(&out.stdout).expect("iperf3 -J prints JSON")
}

/// The number just before the first `marker` in `line`.
fn number_before(line: &str, marker: &str) -> u64 {
    line.split(marker).next().and_then(|h| h.rsplit(' ').next()).and_then(|b| b.parse().ok()).expect(marker)
}

#[test]
fn gsro_recv_says_gro_and_gso_and_send_asks_a_3_12_server_that_ignores_the_keys() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubga") else { return };

    // A 3.12 client has no --gsro: our loops use GRO and GSO all the same, and say so.
    let recv = pair.spawn_recv(&["--iperf3", "--port", PORT]);
    let theirs = iperf3_client_json(&pair, &["-u", "-t", "1", "-b", "50M", "-l", "1400", "--get-server-output"]);
    let line = theirs["server_output_text"].as_str().unwrap_or_else(|| panic!("no server output: {theirs}"));
    assert!(line.contains("; GRO on our receive") && !line.contains("--gsro"), "{line}");
    let (got, sent) = (number_before(line, " bytes in "), u64_at(&theirs, "/end/sum/bytes"));
    assert!(got <= sent && got * 100 >= sent * 95 && got > 1_000_000, "we counted {got} of the {sent} it sent");
    let theirs = iperf3_client_json(&pair, &["-u", "-t", "1", "-b", "20M", "-R", "--get-server-output"]);
    let line = theirs["server_output_text"].as_str().unwrap_or_default();
    assert!(line.contains("; GSO on our send"), "{line}");
    assert!(u64_at(&theirs, "/end/sum/bytes") > 1_000_000, "the client received what we sent with GSO");
    drop(recv.kill());

    // Against a 3.12 server: the keys go out and are ignored; its JSON comes back whole.
    let server = pair.iperf3_server(PORT, &["-1", "-J"]);
    let args = ["--iperf3", "-c", "10.77.0.2", "-u", "-b", "50M", "-l", "1400", "-t", "1", "--warmup", "0"];
    let (out, _) = pair.send(&[&args[..], &["--gsro", "--get-server-output", "-J"]].concat(), Duration::from_secs(30));
    let server = finish(server, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 --gsro: {}", String::from_utf8_lossy(&out.stderr));
    let ours = json(&out);
    let params = &ours["iperf3"]["params"];
    assert_eq!((params["gso"].as_u64(), params["gro"].as_u64()), (Some(1), Some(1)), "{params}");
    assert_eq!((params["gso_dg_size"].as_u64(), params["get_server_output"].as_u64()), (Some(1400), Some(1)));
    let printed: serde_json::Value = serde_json::from_slice(&server.stdout).expect("iperf3 -s -J prints JSON");
    let counted = u64_at(&printed, "/end/sum_received/bytes");
    let brought = &ours["iperf3"]["server"];
    assert_eq!(u64_at(brought, "/output_json/end/sum_received/bytes"), counted, "its own JSON, as it printed it");
    assert_eq!(u64_at(&ours, "/sum/receiver/total_bytes"), counted, "and its count is our receiver side");
    assert!(counted > 1_000_000, "real traffic: {counted}");
    assert!(brought.get("start_ms").is_none() && brought.get("gro").is_none(), "3.12 says neither: {brought}");

    // --gsro asks for UDP: a TCP test, or one with --no-gso, is a usage error before anything connects.
    for (extra, needle) in [(&["--gsro"][..], "needs a UDP test"), (&["-u", "--gsro", "--no-gso"][..], "--no-gso")] {
        let (out, _) =
            pair.send(&[&["--iperf3", "-c", "10.77.0.2", "-t", "1"][..], extra].concat(), Duration::from_secs(10));
        one_line_error(&out, 2, needle);
    }
}
