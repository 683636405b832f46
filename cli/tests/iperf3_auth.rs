//! iperf3's RSA authentication against the real iperf3 (`/usr/bin/iperf3`, Debian's 3.12)
//! between two network namespaces, both roles: `iperf3 -c --username` to `recv --iperf3
//! --rsa-private-key-path`, and `send --iperf3 --username` to `iperf3 -s
//! --rsa-private-key-path`. The key pair is made by `openssl`, the users file's hash by
//! `sha256sum`; a good user's test is checked byte for byte against iperf3's own JSON, a wrong
//! password and a client without credentials are refused as iperf3 refuses them, the refusal
//! named by iperf3's own output. Pairs are named `ubk*`; every process is bounded.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const PORT: &str = "5201";
const USER: &str = "alice";
const PASSWORD: &str = "s3cret-pw";

/// A key pair and a users file letting in [`USER`] with [`PASSWORD`], in a directory removed
/// when dropped.
struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    /// The files, or `None` (the test skipped) without the `openssl` command.
    fn make() -> Option<Keys> {
        if !peer_installed("openssl") {
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let sh = |script: &str| {
            let out = Command::new("sh").arg("-c").arg(script).current_dir(dir.path()).output().expect("sh");
            assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        };
        sh("openssl genrsa -out private.pem 2048 2>/dev/null && openssl rsa -in private.pem -pubout -out public.pem 2>/dev/null");
        sh(&format!(
            "printf '%s' '{{{USER}}}{PASSWORD}' | sha256sum | sed 's/^\\([0-9a-f]*\\) .*/{USER},\\1/' > users.csv"
        ));
        Some(Keys { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// `iperf3 -c 10.77.0.2 ARGS` from the sender namespace, with IPERF3_PASSWORD set to `password`.
fn iperf3_client(pair: &NetnsPair, password: &str, args: &[&str]) -> Output {
    let args = [&["-c", "10.77.0.2", "-p", PORT, "-t", "1"][..], args].concat();
    let mut c = pair.cmd(&pair.sender_ns(), "iperf3", &args);
    c.env("IPERF3_PASSWORD", password);
    run_bounded(c, Duration::from_secs(20)).0
}

/// `uringbench send --iperf3 ARGS` from the sender namespace, with IPERF3_PASSWORD set.
fn send_iperf3(pair: &NetnsPair, password: &str, args: &[&str]) -> Output {
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["send", "--iperf3", "-c", "10.77.0.2", "-p", PORT]);
    c.args(args).env("IPERF3_PASSWORD", password);
    run_bounded(c, Duration::from_secs(30)).0
}

fn printed(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// `iperf3 -c --username --rsa-public-key-path` against `recv --iperf3` with the private key
/// and the users file: the good user's test runs, and what we counted (our line, handed back
/// by `--get-server-output`) is every byte iperf3 says it sent; a wrong password and no
/// credentials at all get iperf3's error 142, which the client prints as "test authorization
/// failed"; our log says why.
#[test]
fn recv_iperf3_lets_in_only_authorized_iperf3_clients() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubka") else { return };
    let Some(keys) = Keys::make() else { return };
    let recv = pair.spawn_recv(&[
        "--iperf3",
        "--port",
        PORT,
        "--rsa-private-key-path",
        &keys.arg("private.pem"),
        "--authorized-users-path",
        &keys.arg("users.csv"),
    ]);
    let public = keys.arg("public.pem");
    let creds = ["--username", USER, "--rsa-public-key-path", public.as_str()];

    let out = iperf3_client(&pair, "wrong-pw", &creds);
    assert!(!out.status.success(), "a wrong password is refused: {}", printed(&out));
    assert!(printed(&out).contains("test authorization failed"), "iperf3 says why: {}", printed(&out));
    let out = iperf3_client(&pair, PASSWORD, &[]);
    assert!(!out.status.success(), "no credentials are refused: {}", printed(&out));
    assert!(printed(&out).contains("test authorization failed"), "iperf3 says why: {}", printed(&out));

    let out = iperf3_client(&pair, PASSWORD, &[&creds[..], &["--get-server-output", "-J"]].concat());
    assert!(out.status.success(), "the authorized user's test runs: {}", printed(&out));
    let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J");
    let line = theirs["server_output_text"].as_str().unwrap_or_else(|| panic!("no server output: {theirs}"));
    assert!(line.contains(&format!("user {USER}")) && !line.contains("incomplete"), "{line}");
    let sent = u64_at(&theirs, "/end/sum_sent/bytes");
    let counted: u64 = line
        .split(" bytes in ")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|b| b.parse().ok())
        .expect("our count");
    assert!(sent > 1_000_000, "real traffic: {sent}");
    assert_eq!(counted, sent, "we counted every byte iperf3 sent");

    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(log.contains("authorization failed: user 'alice': unknown, or a wrong password"), "{log}");
    assert!(log.contains("with RSA credentials of 1 authorized user"), "{log}");
}

/// `send --iperf3 --username --rsa-public-key-path` against a stock `iperf3 -s
/// --rsa-private-key-path --authorized-users-path -1 -J`: a wrong password and no credentials
/// are one-line errors naming the authorization failure (and the server's own JSON names it
/// too); then the good user's test runs, byte-exact against the server's received count.
#[test]
fn send_iperf3_authenticates_to_a_stock_iperf3_server() {
    let Some((_serial, pair)) = peer_pair("iperf3", "ubkb") else { return };
    let Some(keys) = Keys::make() else { return };
    let (private, users, public) = (keys.arg("private.pem"), keys.arg("users.csv"), keys.arg("public.pem"));
    let args = ["-s", "-p", PORT, "-1", "-J", "--rsa-private-key-path", &private, "--authorized-users-path", &users];
    let server = pair
        .cmd(&pair.receiver_ns(), "iperf3", &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iperf3 -s");
    // An authorization failure does not end `iperf3 -s -1`: the good test after it does.
    let server = pair.listening(server, PORT);
    let creds = ["--username", USER, "--rsa-public-key-path", public.as_str()];
    let run = ["-t", "1", "--warmup", "0", "-J"];

    let out = send_iperf3(&pair, "wrong-pw", &[&creds[..], &run].concat());
    one_line_error(&out, 1, "test authorization failed (iperf3 error 142): user 'alice': check the password");
    let out = send_iperf3(&pair, PASSWORD, &run);
    one_line_error(&out, 1, "the server requires credentials (--username, --rsa-public-key-path)");

    let out = send_iperf3(&pair, PASSWORD, &[&creds[..], &run].concat());
    let server = finish(server, Duration::from_secs(10));
    assert!(out.status.success(), "send --iperf3 --username failed: {}", printed(&out));
    let docs: Vec<serde_json::Value> =
        serde_json::Deserializer::from_slice(&server.stdout).into_iter().map(|d| d.expect("iperf3 -J")).collect();
    let refusals = docs.iter().filter(|d| d["error"].as_str().is_some_and(|e| e.contains("test authorization failed")));
    assert_eq!(refusals.count(), 2, "iperf3 -s refused two tests itself: {docs:?}");
    let theirs = docs.last().expect("the good test's document");
    let ours = json(&out);
    let sent = u64_at(&ours, "/sum/sender/total_bytes");
    assert!(sent > 1_000_000, "real traffic: {sent}");
    assert_eq!(u64_at(theirs, "/end/sum_received/bytes"), sent, "iperf3 -s counted every byte we wrote");
}

/// Key and users files that cannot serve: a one-line error naming the file, exit 2, before
/// anything listens or connects (no namespace needed: nothing reaches the network).
#[test]
fn bad_key_and_users_files_are_one_line_usage_errors() {
    let Some(keys) = Keys::make() else { return };
    let run = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args).env("IPERF3_PASSWORD", PASSWORD);
        run_bounded(c, Duration::from_secs(10)).0
    };
    let bad_users = keys.path("bad-users.csv");
    std::fs::write(&bad_users, "alice\n").expect("write");
    let (private, public, users) = (keys.arg("private.pem"), keys.arg("public.pem"), keys.arg("users.csv"));
    let recv = |key: &str, users: &Path| {
        run(&[
            "recv",
            "--iperf3",
            "--port",
            "0",
            "--rsa-private-key-path",
            key,
            "--authorized-users-path",
            &users.display().to_string(),
        ])
    };
    one_line_error(&recv(&public, Path::new(&users)), 2, "--rsa-private-key-path");
    one_line_error(
        &recv(&private, &bad_users),
        2,
        &format!("--authorized-users-path {}: line 1: no comma", bad_users.display()),
    );
    one_line_error(&recv("/nonexistent/key.pem", Path::new(&users)), 2, "/nonexistent/key.pem: cannot read it");
    let out = run(&["recv", "--iperf3", "--port", "0", "--rsa-private-key-path", &private]);
    assert_eq!(out.status.code(), Some(2), "the users file is needed too: {}", printed(&out));
    let send = |key: &str| {
        run(&["send", "--iperf3", "-c", "127.0.0.1", "-p", "9", "--username", USER, "--rsa-public-key-path", key])
    };
    one_line_error(&send(&private), 2, &format!("--rsa-public-key-path {private}: not a PEM RSA public key"));
    let out = run(&["send", "--iperf3", "-c", "127.0.0.1", "--username", USER]);
    assert_eq!(out.status.code(), Some(2), "the public key is needed too: {}", printed(&out));
}
