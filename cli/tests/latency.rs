//! `send --latency` through a bottleneck: a router namespace between sender and receiver,
//! its egress towards the receiver shaped by a `tbf`. The queue must be on the router: a
//! qdisc on the sender's own interface never fills, because TCP small queues hold each flow
//! back before it does.

mod common;

use common::{bin, f64_at, json, run_bounded, serial, FileLock};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Three namespaces, NAME-a (sender, 10.77.1.1) - NAME-r (router) - NAME-b (receiver,
/// 10.77.2.2), removed when dropped (and before they are made, after a killed run).
struct RouterPath {
    name: String,
    _lock: FileLock,
}

const RECV_ADDR: &str = "10.77.2.2";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl RouterPath {
    fn up(name: &str) -> Self {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "netns tests need root (CI runs as root)");
        let lock = FileLock::exclusive(&format!("netns-{name}"));
        let path = Self { name: name.to_string(), _lock: lock };
        path.remove();
        let (a, r, b) = (path.ns("a"), path.ns("r"), path.ns("b"));
        for ns in [&a, &r, &b] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // Each veth is made inside its namespaces, so pairs of other tests never clash.
        let link = |left: &str, lname: &str, right: &str, rname: &str| {
            ip(&["-n", left, "link", "add", lname, "type", "veth", "peer", "name", rname, "netns", right]);
        };
        link(&a, &path.iface("a0"), &r, &path.iface("r0"));
        link(&r, &path.iface("r1"), &b, &path.iface("b0"));
        for (ns, dev, addr) in [
            (&a, path.iface("a0"), "10.77.1.1/24"),
            (&r, path.iface("r0"), "10.77.1.2/24"),
            (&r, path.iface("r1"), "10.77.2.1/24"),
            (&b, path.iface("b0"), "10.77.2.2/24"),
        ] {
            ip(&["-n", ns, "addr", "add", addr, "dev", &dev]);
            ip(&["-n", ns, "link", "set", &dev, "up"]);
        }
        ip(&["-n", &a, "route", "add", "default", "via", "10.77.1.2"]);
        ip(&["-n", &b, "route", "add", "default", "via", "10.77.2.1"]);
        ip(&["netns", "exec", &r, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        path
    }

    fn ns(&self, which: &str) -> String {
        format!("{}-{which}", self.name)
    }

    fn iface(&self, which: &str) -> String {
        format!("{}{which}", self.name)
    }

    /// Shapes the router's egress towards the receiver: `tbf rate 100mbit burst 32k latency L`.
    fn bottleneck(&self, latency: &str) {
        let (r, dev) = (self.ns("r"), self.iface("r1"));
        let args =
            ["qdisc", "replace", "dev", &dev, "root", "tbf", "rate", "100mbit", "burst", "32k", "latency", latency];
        let out = Command::new("ip").args(["netns", "exec", &r, "tc"]).args(args).output().expect("run tc");
        assert!(out.status.success(), "tc {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    }

    /// The bytes the router's tbf sent: the load crossed the bottleneck.
    fn tbf_sent_bytes(&self) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns("r"), "tc", "-s", "qdisc", "show", "dev", &self.iface("r1")])
            .output()
            .expect("tc -s");
        let text = String::from_utf8_lossy(&out.stdout);
        let sent = text.split_whitespace().skip_while(|w| *w != "Sent").nth(1);
        sent.and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no Sent counter in:\n{text}"))
    }

    /// `recv` in the receiver's namespace, killed when dropped (a failed wait included).
    fn recv(&self) -> Running {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns("b"), bin(), "recv", "--bind", RECV_ADDR]);
        let running = Running(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn recv"));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let out = Command::new("ip").args(["netns", "exec", &self.ns("b"), "ss", "-Htln"]).output().expect("ss");
            if String::from_utf8_lossy(&out.stdout).contains(":5300 ") {
                return running;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("recv did not listen within 5 s");
    }

    fn run(&self, args: &[&str], limit: Duration) -> Output {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns("a"), bin()]).args(args);
        run_bounded(c, limit).0
    }

    fn remove(&self) {
        for which in ["a", "r", "b"] {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(which)]).output();
        }
    }
}

impl Drop for RouterPath {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Kills a recv when dropped.
struct Running(std::process::Child);
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The traffic lock, a router path named `name` with `recv` on its receiver; dropped in
/// reverse order (recv killed, namespaces removed, lock released).
fn bed(name: &str) -> (common::Serial, RouterPath, Running) {
    let serial = serial();
    let path = RouterPath::up(name);
    let recv = path.recv();
    (serial, path, recv)
}

fn send_latency(path: &RouterPath) -> serde_json::Value {
    let out = path.run(
        &["send", "-c", RECV_ADDR, "-P", "8", "-C", "cubic", "--latency", "-t", "4", "-i", "1", "-J"],
        Duration::from_secs(40),
    );
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

#[test]
fn a_deep_buffer_inflates_latency_under_load_and_a_shallow_one_less() {
    let (_serial, path, _recv) = bed("ublat");
    path.bottleneck("200ms");
    let before = path.tbf_sent_bytes();
    let deep = send_latency(&path);
    let crossed = path.tbf_sent_bytes() - before;
    let received = deep["sum"]["receiver"]["total_bytes"].as_u64().expect("receiver total");
    assert!(crossed >= received, "the load crossed the router's tbf: {crossed} bytes sent there, {received} received");
    let (idle, loaded) = (f64_at(&deep, "/latency/idle/p50_ms"), f64_at(&deep, "/latency/loaded/p50_ms"));
    assert!(f64_at(&deep, "/latency/idle/count") >= 50.0, "idle probes: {}", deep["latency"]);
    // One probe in flight at a time: behind a 200 ms queue, about five a second.
    assert!(f64_at(&deep, "/latency/loaded/count") >= 10.0, "loaded probes: {}", deep["latency"]);
    assert!(loaded >= 10.0 * idle, "loaded p50 {loaded} ms is not 10x the idle p50 {idle} ms: {}", deep["latency"]);
    let rpm = f64_at(&deep, "/latency/rpm");
    assert!((rpm - 60_000.0 / loaded).abs() < 1.0, "RPM {rpm} is 60 s over the loaded p50 {loaded} ms");
    assert_eq!(deep["latency"]["intervals"].as_array().map(Vec::len), Some(4), "one figure per interval");
    let queue = deep["verdict"]["queue"].as_str().unwrap_or_default();
    assert!(queue.contains("a standing queue"), "the verdict names the queue: {}", deep["verdict"]);
    // Neither end has a qdisc that could hold it: the receiver said so for its interface.
    assert_eq!(deep["latency"]["receiver_queues"]["interface"], path.iface("b0"), "{}", deep["latency"]);
    assert!(queue.contains("not on either end: on the path between"), "{}", deep["verdict"]);
    let probe_bytes = deep["latency"]["bytes_sent"].as_u64().unwrap_or(0);
    assert!(probe_bytes > 0, "the probe's bytes are shown apart");
    assert_eq!(
        deep["sum"]["sender"]["total_bytes"], deep["sum"]["receiver"]["total_bytes"],
        "the load's bytes match exactly, without the probe's"
    );

    path.bottleneck("5ms");
    let shallow = send_latency(&path);
    let (deep_growth, shallow_growth) =
        (f64_at(&deep, "/latency/inflation/p50_ms"), f64_at(&shallow, "/latency/inflation/p50_ms"));
    println!(
        "tbf 100mbit latency 200ms: idle p50 {idle:.3} ms, loaded p50 {loaded:.3} ms, p99 {:.3} ms, inflation {deep_growth:.3} ms, {rpm:.0} RPM; latency 5ms: loaded p50 {:.3} ms, inflation {shallow_growth:.3} ms",
        f64_at(&deep, "/latency/loaded/p99_ms"),
        f64_at(&shallow, "/latency/loaded/p50_ms")
    );
    assert!(
        shallow_growth <= deep_growth / 2.0,
        "a 5 ms tbf inflates by {shallow_growth} ms, more than half the 200 ms one's {deep_growth} ms"
    );
}

/// An ingress qdisc on the receiver's interface could hold a queue there (packets redirected
/// to an ifb's shaper): the verdict then names it beside the path, instead of ruling it out.
#[test]
fn a_receiver_ingress_qdisc_is_named_as_a_place_the_queue_could_be() {
    let (_serial, path, _recv) = bed("ublati");
    path.bottleneck("200ms");
    let (b, dev) = (path.ns("b"), path.iface("b0"));
    ip(&["netns", "exec", &b, "tc", "qdisc", "add", "dev", &dev, "clsact"]);
    let doc = send_latency(&path);
    assert_eq!(doc["latency"]["receiver_queues"]["ingress"], "clsact", "{}", doc["latency"]);
    let queue = doc["verdict"]["queue"].as_str().unwrap_or_default();
    assert!(queue.contains(&format!("the receiver's clsact qdisc on {dev} (ingress) could hold it")), "{queue}");
}

#[test]
fn udp_probe_is_answered_beside_a_paced_load() {
    let (_serial, path, _recv) = bed("ublatu");
    let out =
        path.run(&["send", "-c", RECV_ADDR, "-u", "-b", "50m", "--latency", "-t", "2", "-J"], Duration::from_secs(30));
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["latency"]["proto"], "udp");
    assert!(f64_at(&doc, "/latency/idle/count") >= 50.0, "{}", doc["latency"]);
    assert!(f64_at(&doc, "/latency/loaded/count") >= 100.0, "{}", doc["latency"]);
    assert_eq!(doc["sum"]["receiver"]["lost"], 0, "the probe's datagrams are not the load's");
    assert_eq!(doc["sum"]["receiver"]["datagrams"], doc["sum"]["sender"]["datagrams"], "nor counted as the load's");
}

#[test]
fn experiment_compares_bbr_and_cubic_loaded_latency_through_the_deep_buffer() {
    let (_serial, path, _recv) = bed("ublatx");
    path.bottleneck("200ms");
    let dir = std::env::temp_dir().join(format!("ub-latency-exp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (plan, state, saved) = (dir.join("cc.toml"), dir.join("cc.state"), dir.join("cc.json"));
    let text = format!(
        r#"
runs = 6
warmup_runs = 0
seed = 3

[test]
target = "{RECV_ADDR}"
queues = 8
time = "2s"
warmup = "500ms"
cooldown = "250ms"
latency = true

[[variant]]
name = "cubic"
congestion = "cubic"

[[variant]]
name = "bbr"
congestion = "bbr"
"#
    );
    std::fs::write(&plan, text).unwrap();
    let args = ["experiment", plan.to_str().unwrap(), "--state", state.to_str().unwrap(), "--json-file"];
    let mut all: Vec<&str> = args.to_vec();
    all.push(saved.to_str().unwrap());
    let out = path.run(&all, Duration::from_secs(240));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "experiment failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("loaded p99 ms") && stdout.contains("RPM"), "the table shows both: {stdout}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let comparisons = doc["compare"]["comparisons"].as_array().expect("comparisons").clone();
    for metric in ["loaded_p99_ms", "rpm"] {
        let c = comparisons.iter().find(|c| c["metric"] == metric).unwrap_or_else(|| panic!("no {metric}: {doc}"));
        assert_eq!((c["a"].as_str(), c["b"].as_str()), (Some("cubic"), Some("bbr")), "{c}");
        assert_eq!((c["n_a"].as_u64(), c["n_b"].as_u64()), (Some(6), Some(6)), "six measured runs each: {c}");
        assert!(c["p_value"].as_f64().is_some() && c["ci95"].is_array(), "compared with CI and p-value: {c}");
        println!(
            "{metric}: cubic median {:.3}, bbr median {:.3}, ratio {:.3} (95% CI {}), p {:.4}: {}",
            c["median_a"].as_f64().unwrap(),
            c["median_b"].as_f64().unwrap(),
            c["ratio"].as_f64().unwrap_or(f64::NAN),
            c["ci95"],
            c["p_value"].as_f64().unwrap(),
            c["verdict"]
        );
    }
    // Every run crossed the bottleneck with the probe answered under load.
    for v in doc["variants"].as_array().unwrap() {
        for run in v["runs"].as_array().unwrap() {
            assert!(run["latency"]["loaded"]["count"].as_u64().unwrap_or(0) > 0, "{}", run["latency"]);
        }
    }
}
