//! Tuning experiments on a netns pair: `experiment` with no qdisc against `tbf rate 100mbit` on
//! the sender's veth (found slower, and `tc qdisc show` exactly as before, also after SIGINT),
//! a receiver-side variant the receiver does not allow, `search` for the rate a tbf carries,
//! `settings` apply/revert, and `compare`'s usage errors.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The path `search` must find: 200 Mbit/s, one to two orders of magnitude below what this
/// machine's sender reaches even loaded, so the rate found is the qdisc's and never the CPU's.
const TBF: &str = "tbf rate 200mbit burst 256kb latency 10ms";
/// The experiment's shaped variant: 100 Mbit/s, an effect (x20 or more: the debug build's
/// unshaped stream still ran at 2-3 Gbit/s while other builds loaded this 2-vCPU machine) that
/// no run-to-run noise can hide, so "significant and slower" is behaviour, not luck.
const TBF_EXPERIMENT: &str = "tbf rate 100mbit burst 256kb latency 10ms";

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ub-tuning-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn qdisc_show(pair: &NetnsPair, iface: &str) -> String {
    let out = pair.cmd(&pair.sender_ns(), "tc", &["qdisc", "show", "dev", iface]).output().expect("tc");
    assert!(out.status.success(), "tc qdisc show: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sender_if(pair: &NetnsPair) -> String {
    format!("{}a0", pair.name)
}

/// A plan: a baseline and a variant with the tbf on the sender's veth, plus `extra` variants.
fn tbf_plan(pair: &NetnsPair, runs: u32, time: &str, extra: &str) -> String {
    format!(
        r#"
runs = {runs}
warmup_runs = 0
seed = 7

[test]
target = "{RECV_ADDR}"
time = "{time}"
warmup = "200ms"
cooldown = "100ms"
cpus = "0"

[[variant]]
name = "plain"

[[variant]]
name = "tbf-100m"
[variant.iface.{iface}]
qdisc = "{TBF_EXPERIMENT}"
{extra}
"#,
        iface = sender_if(pair)
    )
}

fn experiment(pair: &NetnsPair, plan: &Path, state: &Path, extra: &[&str]) -> Command {
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["experiment"]);
    c.arg(plan).arg("--state").arg(state).args(extra);
    c
}

#[test]
fn experiment_finds_the_tbf_slower_and_leaves_the_qdisc_as_it_was() {
    let _serial = serial();
    let pair = NetnsPair::up("uotx");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let dir = temp_dir("ab");
    let (plan, state, saved, svg) = (dir.join("p.toml"), dir.join("s.state"), dir.join("r.json"), dir.join("r.svg"));
    std::fs::write(&plan, tbf_plan(&pair, 6, "600ms", "")).unwrap();
    let before = qdisc_show(&pair, &sender_if(&pair));
    let mut c = experiment(&pair, &plan, &state, &["--svg"]);
    c.arg(&svg).arg("--json").arg(&saved);
    let (out, _) = run_bounded(c, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "experiment failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(qdisc_show(&pair, &sender_if(&pair)), before, "tc qdisc show exactly as before: {stdout}");
    assert!(!state.exists(), "the state file is removed after the revert");

    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert_eq!(doc["kind"], "experiment");
    let orders = doc["block_orders"].as_array().unwrap();
    assert_eq!(orders.len(), 6);
    assert!(
        orders.iter().any(|o| o[0] == "plain") && orders.iter().any(|o| o[0] == "tbf-100m"),
        "randomised: {orders:?}"
    );
    assert!(doc["variants"][1]["applied"][0].as_str().unwrap().contains("(was default)"), "{}", doc["variants"][1]);
    // Every run, warm-ups included, counted on stderr: 6 blocks of 2 variants.
    let runs = 6 * 2 * (doc["warmup_runs"].as_u64().unwrap_or(0) as usize + 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("experiment: run {runs} of {runs}, ")), "{stderr}");
    // The runs' own path limits saw the tbf: the report is from real traffic through it.
    let tbf_run = &doc["variants"][1]["runs"][0];
    let limits = tbf_run.pointer("/path/limits").and_then(|l| l.as_array()).cloned().unwrap_or_default();
    assert!(
        limits.iter().any(|l| l["bits_per_second"].as_f64() == Some(1e8)),
        "tbf rate in the path limits: {tbf_run}"
    );
    let c = doc["compare"]["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "received_gbps")
        .expect("a throughput comparison")
        .clone();
    assert_eq!((c["a"].as_str(), c["b"].as_str()), (Some("plain"), Some("tbf-100m")));
    assert!(c["significant"] == true && c["p_value"].as_f64().unwrap() < 0.01, "{c}");
    assert!(c["ratio"].as_f64().unwrap() < 1.0 && c["ci95"][1].as_f64().unwrap() < 1.0, "{c}");
    assert!(stdout.contains("tbf-100m is ") && stdout.contains("% slower than plain"), "{stdout}");
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(svg_text.matches(r#"class="point""#).count(), 12 + 2 + 2, "6 runs each, medians, ranges");

    // compare re-reads the saved experiment and gives the same answer.
    let mut again = Command::new(bin());
    again.args(["compare", "-J"]).arg(&saved);
    let (out, _) = run_bounded(again, Duration::from_secs(30));
    let re = json(&out);
    assert_eq!(re["comparisons"][0]["p_value"], c["p_value"], "seeded, reproducible");
}

#[test]
fn sigint_in_the_middle_reverts_the_qdisc() {
    let _serial = serial();
    let pair = NetnsPair::up("uoti");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let dir = temp_dir("int");
    let (plan, state) = (dir.join("p.toml"), dir.join("s.state"));
    std::fs::write(&plan, tbf_plan(&pair, 20, "1s", "")).unwrap();
    let before = qdisc_show(&pair, &sender_if(&pair));
    let mut child =
        experiment(&pair, &plan, &state, &[]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !qdisc_show(&pair, &sender_if(&pair)).contains("tbf") {
        assert!(Instant::now() < deadline, "the tbf variant never ran");
        assert!(child.try_wait().unwrap().is_none(), "experiment ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(std::fs::read_to_string(&state).unwrap().contains("qdisc\t"), "recorded before the change");
    // `ip netns exec` execs the program: the child is uringbench itself.
    // SAFETY: kill(2) on a process this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = finish(child, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "exit 130 after an interrupt: {stderr}");
    assert!(stderr.contains("interrupted: reverted"), "{stderr}");
    assert_eq!(qdisc_show(&pair, &sender_if(&pair)), before, "tc qdisc show exactly as before after SIGINT");
    assert!(!state.exists());
}

#[test]
fn receiver_variants_are_applied_only_by_name() {
    let _serial = serial();
    let pair = NetnsPair::up("uotv");
    let dir = temp_dir("rv");
    let variants = dir.join("variants.toml");
    let rif = pair.receiver_if();
    let gro = |p: &NetnsPair| {
        let out = p.cmd(&p.receiver_ns(), "ethtool", &["-k", &rif]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("generic-receive-offload:"))
            .unwrap()
            .to_owned()
    };
    let gro_before = gro(&pair);
    let flip = if gro_before.contains(": on") { "off" } else { "on" };
    std::fs::write(&variants, format!("[gro-flip.iface.{rif}]\nfeatures = {{ gro = \"{flip}\" }}\n")).unwrap();
    let recv = pair.spawn_recv(&["--cpus", "1", "--variants", variants.to_str().unwrap()]);
    let (plan, state) = (dir.join("p.toml"), dir.join("s.state"));

    // A name the receiver does not list: refused with the reason, nothing changed anywhere.
    let bogus = format!(
        "runs = 2\nwarmup_runs = 0\n[test]\ntarget = \"{RECV_ADDR}\"\ntime = \"300ms\"\nwarmup = \"100ms\"\ncooldown = \"50ms\"\n\
         [[variant]]\nname = \"a\"\nreceiver = \"rm-everything\"\n[[variant]]\nname = \"b\"\n"
    );
    std::fs::write(&plan, &bogus).unwrap();
    let (out, _) = run_bounded(experiment(&pair, &plan, &state, &[]), Duration::from_secs(60));
    one_line_error(&out, 1, "receiver variant 'rm-everything' is not one this receiver allows");
    assert!(String::from_utf8_lossy(&out.stderr).contains("gro-flip"), "names what it allows");
    assert!(!state.exists());

    // The allowed name: applied for its tests only, reverted after each.
    std::fs::write(&plan, bogus.replace("rm-everything", "gro-flip")).unwrap();
    let (out, _) = run_bounded(experiment(&pair, &plan, &state, &["--format", "json"]), Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["variants"][0]["receiver_variant"], "gro-flip");
    assert_eq!(doc["variants"][0]["runs"][0]["test"]["variant"], "gro-flip", "the name travels in the test spec");
    assert_eq!(gro(&pair), gro_before, "the receiver reverted its variant");
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert_eq!(log.matches(&format!("receiver variant gro-flip: ethtool -K {rif} gro {flip}")).count(), 2, "{log}");
    assert!(log.contains("refused test") && log.contains("rm-everything"), "{log}");
}

#[test]
fn search_finds_the_rate_a_tbf_carries() {
    let _serial = serial();
    let pair = NetnsPair::up("uots");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let iface = sender_if(&pair);
    let mut args = vec!["qdisc", "replace", "dev", iface.as_str(), "root"];
    args.extend(TBF.split(' '));
    assert!(pair.cmd(&pair.sender_ns(), "tc", &args).status().unwrap().success());
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["search"]);
    c.args(["-c", RECV_ADDR, "-u", "-l", "1470", "--cpus", "0", "--trial", "1s", "--warmup", "300ms"]).args([
        "--cooldown",
        "100ms",
        "--resolution",
        "2%",
        "--confirm",
        "2",
        "--max-rate",
        "1G",
        "-J",
    ]);
    let page = std::env::temp_dir().join(format!("ub-search-{}.html", std::process::id()));
    c.arg("--html").arg(&page);
    let (out, _) = run_bounded(c, Duration::from_secs(150));
    let doc = json(&out);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let rate = f64_at(&doc, "/rate_bps");
    let shown = page_headline(&page, "data-bits-per-second");
    assert!(same_figure(shown, rate), "search --html shows {shown}, the JSON {rate}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("class=\"trial\"").count(), doc["steps"].as_array().unwrap().len(), "a row per trial");
    let _ = std::fs::remove_file(&page);
    // Within the search's resolution below the tbf's 200 Mbit/s, and never above it.
    assert!((1.7e8..=2.05e8).contains(&rate), "lossless rate through tbf 200mbit: {rate}");
    assert_eq!(doc["loss_threshold"], 0.0);
    let steps = doc["steps"].as_array().unwrap();
    assert!(steps.len() >= 3 && steps.iter().all(|s| s["figures"]["loss_ratio"].is_number()), "{doc}");
    // A failed confirmation lowers the bound and the search goes on: the last two trials are
    // the confirmations of the rate found, both lossless.
    let last: Vec<&serde_json::Value> = steps.iter().rev().take(2).collect();
    assert!(
        last.iter().all(|s| s["phase"] == "confirm"
            && s["rate_bps"].as_f64() == Some(rate)
            && s["passed"] == true
            && s["figures"]["loss_ratio"] == 0.0),
        "{doc}"
    );
    assert!((f64_at(&doc, "/pps") - rate / (1470.0 * 8.0)).abs() < 1.0);
    // Where the search stands, on stderr after each trial (stdout is the JSON alone).
    let stderr = String::from_utf8_lossy(&out.stderr);
    for k in 1..=steps.len() {
        assert!(stderr.contains(&format!("search: run {k} of about ")), "trial {k} on stderr: {stderr}");
    }

    // A path slower than the lowest rate tried (2 Mbit/s against 100M down to 6.25M), with a
    // queue too short to hold the sender back: every trial loses, exit 1.
    let mut args = vec!["qdisc", "replace", "dev", iface.as_str(), "root"];
    args.extend("tbf rate 2mbit burst 5kb limit 3000".split(' '));
    assert!(pair.cmd(&pair.sender_ns(), "tc", &args).status().unwrap().success());
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["search"]);
    c.args(["-c", RECV_ADDR, "-u", "--cpus", "0", "--trial", "500ms", "--warmup", "200ms", "--cooldown", "100ms"])
        .args(["--resolution", "10%", "--confirm", "1", "--max-rate", "100M"]);
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("result: none: even the lowest rate tried"), "{stdout}");
}

#[test]
fn settings_apply_and_revert_a_namespace_sysctl() {
    let pair = NetnsPair::up("uott");
    let dir = temp_dir("set");
    let state = dir.join("s.state");
    let path = "/proc/sys/net/ipv4/tcp_rmem";
    let read =
        || String::from_utf8_lossy(&pair.cmd(&pair.sender_ns(), "cat", &[path]).output().unwrap().stdout).to_string();
    let before = read();
    let settings = |args: &[&str]| {
        let mut c = pair.cmd(&pair.sender_ns(), bin(), &["settings"]);
        c.args(args).arg("--state").arg(&state);
        run_bounded(c, Duration::from_secs(30)).0
    };
    // A maximum this namespace does not have yet.
    let f: Vec<u64> = before.split_whitespace().map(|v| v.parse().unwrap()).collect();
    let want = format!("{} {} {}", f[0], f[1], f[2] + 4096);
    let out = settings(&["apply", &format!("sysctl:net.ipv4.tcp_rmem={want}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read().split_whitespace().collect::<Vec<_>>().join(" "), want);
    let line = std::fs::read_to_string(&state).unwrap();
    assert!(
        line.contains(&format!("file\t{path}\t{}", before.split_whitespace().collect::<Vec<_>>().join(" "))),
        "{line}"
    );
    let out = settings(&["revert"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read(), before);
    assert!(!state.exists());
    one_line_error(&settings(&["revert"]), 2, "nothing to revert");
    one_line_error(&settings(&["apply", "file:/etc/passwd=x"]), 2, "may write only under");
}

#[test]
fn compare_usage_errors_are_one_line() {
    let dir = temp_dir("cmp");
    let a = dir.join("a.json");
    // A document the previous release wrote from a real run: compare reads typed documents.
    std::fs::write(&a, include_str!("../../engine/tests/fixtures/53b0d44/stream-tcp.json")).unwrap();
    let run = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.arg("compare").args(args);
        run_bounded(c, Duration::from_secs(30)).0
    };
    let a = a.to_str().unwrap();
    one_line_error(&run(&[a]), 2, "at least two variants");
    one_line_error(&run(&[a, "/nonexistent.json"]), 2, "/nonexistent.json");
    one_line_error(&run(&[a, a, "--metric", "speed"]), 2, "unknown metric 'speed'");
    let garbage = dir.join("g.json");
    std::fs::write(&garbage, "{\"x\": 1}").unwrap();
    one_line_error(&run(&[a, garbage.to_str().unwrap()]), 2, "not a uringbench");
    let page = dir.join("compare.html");
    let out = run(&[&format!("x={a},{a}"), &format!("y={a}"), "-J", "--html", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["variants"][0]["runs"], 2, "two files joined into one variant");
    assert_eq!(doc["comparisons"][0]["significant"], false);
    // The page holds a row per comparison of the document.
    let html = std::fs::read_to_string(&page).expect("compare --html wrote its page");
    assert_eq!(html.matches("class=\"comparison\"").count(), doc["comparisons"].as_array().unwrap().len());
}

/// `kill -9` of `recv --variants` during a test under a variant leaves its settings applied;
/// the next start reverts them (read back: the sysctl, the qdisc, the GRO feature) and says so.
#[test]
fn a_variant_left_by_kill_9_is_reverted_at_the_next_start() {
    let _serial = serial();
    let pair = NetnsPair::up("uotk");
    let dir = temp_dir("k9");
    let rif = pair.receiver_if();
    let rns = pair.receiver_ns();
    let read = |args: &[&str]| {
        let out = pair.cmd(&rns, args[0], &args[1..]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let host = || {
        let gro = read(&["ethtool", "-k", &rif])
            .lines()
            .find(|l| l.starts_with("generic-receive-offload:"))
            .map(str::to_owned);
        (read(&["sysctl", "-n", "net.ipv4.tcp_ecn"]), read(&["tc", "qdisc", "show", "dev", &rif]), gro)
    };
    let before = host();
    let ecn = if before.0.trim() == "1" { "2" } else { "1" };
    let flip = if before.2.as_deref().unwrap_or_default().contains(": on") { "off" } else { "on" };
    let variants = dir.join("variants.toml");
    std::fs::write(
        &variants,
        format!(
            "[left]\nsysctl = {{ \"net.ipv4.tcp_ecn\" = \"{ecn}\" }}\n[left.iface.{rif}]\nfeatures = {{ gro = \"{flip}\" }}\n\
             qdisc = \"tbf rate 500mbit burst 256kb latency 10ms\"\n"
        ),
    )
    .unwrap();
    let v = variants.to_str().unwrap();
    let mut recv = pair.spawn_recv(&["--cpus", "1", "--variants", v]);
    let (plan, state) = (dir.join("p.toml"), dir.join("s.state"));
    std::fs::write(
        &plan,
        format!(
            "runs = 1\nwarmup_runs = 0\n[test]\ntarget = \"{RECV_ADDR}\"\ntime = \"5s\"\nwarmup = \"0s\"\ncooldown = \"0s\"\n\
             [[variant]]\nname = \"a\"\nreceiver = \"left\"\n[[variant]]\nname = \"b\"\n"
        ),
    )
    .unwrap();
    let experiment = experiment(&pair, &plan, &state, &[]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut experiment = KillOnDrop(experiment);
    let until = Instant::now() + Duration::from_secs(15);
    while host().0.trim() != ecn && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    recv.kill_now();
    let left = host();
    assert_eq!(left.0.trim(), ecn, "the variant was applied when recv was killed");
    assert_ne!(left, before, "and stays applied after kill -9");
    let _ = experiment.0.kill();
    let _ = experiment.0.wait();
    let recv = pair.spawn_recv(&["--cpus", "1", "--variants", v]);
    // It listens (bound) a moment before it serves, which is when the revert runs.
    let until = Instant::now() + Duration::from_secs(5);
    while host() != before && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(host(), before, "the restart reverted the sysctl, the qdisc and GRO");
    std::thread::sleep(Duration::from_millis(200));
    let log = String::from_utf8_lossy(&recv.kill().stdout).to_string();
    assert!(log.contains("reverted the receiver variant an earlier run left applied"), "{log}");
    assert!(log.contains("tcp_ecn <- ") && log.contains("gro "), "it says what it restored: {log}");
}

/// A child killed (and reaped) when dropped.
struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
