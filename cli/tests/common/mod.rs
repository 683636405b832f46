//! Two-host test bed for integration tests: a netns pair made by scripts/netns-pair.sh,
//! and helpers to run uringbench inside it. Tests need root (CI runs as root).

#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Traffic tests share two CPUs; running them one at a time keeps timings meaningful.
static TRAFFIC: Mutex<()> = Mutex::new(());

/// Held while a traffic test runs: one at a time in this process (the mutex) and across
/// processes (an exclusive flock), so test runs from two checkouts on one machine do not share
/// the CPUs either.
pub struct Serial {
    _lock: FileLock,
    _guard: MutexGuard<'static, ()>,
}

pub fn serial() -> Serial {
    let guard = TRAFFIC.lock().unwrap_or_else(|p| p.into_inner());
    Serial { _lock: FileLock::exclusive("traffic"), _guard: guard }
}

/// An exclusive `flock` on /tmp/uringbench-test-NAME.lock, released when dropped (or when the
/// process dies, so a killed test run never leaves it held).
pub struct FileLock(std::fs::File);

impl FileLock {
    pub fn exclusive(name: &str) -> Self {
        use std::os::fd::AsRawFd;
        let path = format!("/tmp/uringbench-test-{name}.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: flock on a descriptor this function owns; blocking is intended.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {path}: {}", std::io::Error::last_os_error());
        Self(file)
    }
}

/// Whether a peer tool CI installs (iperf, iperf3) runs (`program -v`); when it does not, the
/// calling test is marked skipped, saying so, and returns.
pub fn peer_installed(program: &str) -> bool {
    let there = Command::new(program).arg("-v").output().is_ok();
    if !there {
        skip(Lacking::Installed, &format!("{program} is not installed: scripts/install-deps.sh --test installs it"));
    }
    there
}

/// For a test against a peer tool: the traffic lock and a netns pair named `name`, or `None`
/// (the test skipped) when the tool is not installed.
pub fn peer_pair(program: &str, name: &str) -> Option<(Serial, NetnsPair)> {
    peer_installed(program).then(|| (serial(), NetnsPair::up(name)))
}

/// What a skipped test lacked, which decides whether CI may skip it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lacking {
    /// A tool CI installs (scripts/install-deps.sh --test): with URINGBENCH_NO_SKIP=1 (set by
    /// .ci/run for scripts/test.sh) the skip is a failure.
    Installed,
    /// The VM lab, which CI runs in a stage of its own (scripts/vmlab.sh run sets
    /// URINGBENCH_VMLAB_REQUIRED=1 there, making a missing lab a failure).
    VmLab,
}

/// Marks the calling test as skipped: prints `SKIP: <binary>::<test>: <reason>` and appends
/// the same line to $URINGBENCH_SKIP_LOG (scripts/test.sh counts those lines apart from the
/// passes: cargo captures a passing test's output, so stdout alone would hide the skip), else
/// to target/tmp/skipped-tests.log. The caller returns right after. Panics instead when
/// URINGBENCH_NO_SKIP is set and the missing piece is one CI installs.
pub fn skip(lacking: Lacking, reason: &str) {
    let thread = std::thread::current();
    // libtest runs each test on a thread named after it.
    let test = thread.name().unwrap_or("unnamed test");
    let line = format!("SKIP: {}::{test}: {reason}", env!("CARGO_CRATE_NAME"));
    assert!(
        lacking != Lacking::Installed || std::env::var_os("URINGBENCH_NO_SKIP").is_none(),
        "{line} (URINGBENCH_NO_SKIP is set: CI installs this, so a skip is a failure)"
    );
    println!("{line}");
    let log = std::env::var_os("URINGBENCH_SKIP_LOG")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skipped-tests.log"), PathBuf::from);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap_or_else(|e| panic!("open the skip log {}: {e}", log.display()));
    // One write of one line to an O_APPEND file: test binaries appending at once never interleave.
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes())
        .unwrap_or_else(|e| panic!("write the skip log {}: {e}", log.display()));
}

pub const RECV_ADDR: &str = "10.77.0.2";

/// Python framing of `recv`'s control messages (docs/protocol.md): `frame(msg)` and
/// `read_msg(sock)`, for tests that speak the protocol from the outside.
pub const PY_FRAMING: &str = r#"import json, socket, struct
def frame(msg):
    body = json.dumps(msg).encode()
    return struct.pack(">I", len(body)) + body
def read_msg(s):
    def exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError("closed")
            b += c
        return b
    n = struct.unpack(">I", exact(4))[0] & 0x7fffffff
    return json.loads(exact(n))
"#;

/// Python for a raw iperf3 client: `read_state(s)` is the server's next answer, a state byte
/// and, after SERVER_ERROR (254), its error number and errno (which may come in separate
/// segments, or the errno not at all), as a list of bytes.
pub const PY_IPERF3_STATE: &str = r#"
def read_state(s):
    reply = s.recv(1)
    while reply[:1] == bytes([254]) and len(reply) < 9:
        more = s.recv(9 - len(reply))
        if not more:
            break
        reply += more
    return list(reply)
"#;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_uringbench")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns-pair.sh")
}

/// A netns pair that removes itself when dropped. While it exists it holds a lock on its
/// name, so two test runs on one machine never build or remove the same pair at once.
pub struct NetnsPair {
    pub name: String,
    _lock: FileLock,
}

impl NetnsPair {
    pub fn up(name: &str) -> Self {
        Self::up_with_mtu(name, 1500)
    }

    pub fn up_with_mtu(name: &str, mtu: u32) -> Self {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "netns tests need root (CI runs as root)");
        let lock = FileLock::exclusive(&format!("netns-{name}"));
        let out = Command::new("bash")
            .arg(script())
            .args(["up", "--name", name, "--mtu", &mtu.to_string()])
            .output()
            .expect("run netns-pair.sh");
        assert!(out.status.success(), "netns-pair.sh up failed: {}", String::from_utf8_lossy(&out.stderr));
        Self { name: name.to_string(), _lock: lock }
    }

    pub fn sender_ns(&self) -> String {
        format!("{}-a", self.name)
    }
    pub fn receiver_ns(&self) -> String {
        format!("{}-b", self.name)
    }
    pub fn receiver_if(&self) -> String {
        format!("{}b0", self.name)
    }

    /// A command run inside namespace `ns`.
    pub fn cmd(&self, ns: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]).args(args);
        c
    }

    /// `uringbench recv ARGS` in the receiver namespace, stdout captured; killed when dropped.
    pub fn spawn_recv(&self, args: &[&str]) -> Recv {
        self.spawn_recv_under(&[], args)
    }

    /// `uringbench recv ARGS` run by `wrapper` (e.g. `prlimit --nofile=40`).
    pub fn spawn_recv_under(&self, wrapper: &[&str], args: &[&str]) -> Recv {
        let mut c = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = self.cmd(&self.receiver_ns(), program, rest);
                c.args([bin(), "recv"]);
                c
            }
            None => self.cmd(&self.receiver_ns(), bin(), &["recv"]),
        };
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = c.spawn().expect("spawn recv");
        let port = args.iter().position(|a| *a == "--port").map_or("5300", |i| args[i + 1]);
        self.wait_listening(port);
        Recv(Some(child))
    }

    /// Waits until something listens on TCP `port` in the receiver namespace.
    pub fn wait_listening(&self, port: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let out = self.cmd(&self.receiver_ns(), "ss", &["-Htln"]).output().expect("ss");
            if String::from_utf8_lossy(&out.stdout).contains(&format!(":{port} ")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nothing listens on port {port} in {} after 5 s", self.receiver_ns());
    }

    /// A process spawned in a namespace that should listen on TCP `port`: killed (not left
    /// behind) when nothing listens there within the wait.
    pub fn listening(&self, mut child: Child, port: &str) -> Child {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.wait_listening(port))) {
            let _ = child.kill();
            let _ = child.wait();
            std::panic::resume_unwind(panic);
        }
        child
    }

    /// A stock `iperf3 -s -p PORT EXTRA...` in the receiver namespace, its output captured,
    /// once it listens.
    pub fn iperf3_server(&self, port: &str, extra: &[&str]) -> Child {
        let args: Vec<&str> = ["-s", "-p", port].iter().chain(extra).copied().collect();
        let child = self
            .cmd(&self.receiver_ns(), "iperf3", &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iperf3 -s");
        self.listening(child, port)
    }

    /// `uringbench send ARGS` in the sender namespace, waited for (bounded by `limit`).
    pub fn send(&self, args: &[&str], limit: Duration) -> (Output, Duration) {
        let mut c = self.cmd(&self.sender_ns(), bin(), &["send"]);
        c.args(args);
        run_bounded(c, limit)
    }

    /// One counter of namespace `ns`'s /proc/net/snmp or /proc/net/netstat, read here (e.g.
    /// "Tcp", "InSegs"; "IpExt", "InTruncatedPkts").
    pub fn snmp_counter(&self, ns: &str, group: &str, name: &str) -> u64 {
        let out = self.cmd(ns, "cat", &["/proc/net/snmp", "/proc/net/netstat"]).output().expect("cat /proc/net/snmp");
        let text = String::from_utf8_lossy(&out.stdout);
        let prefix = format!("{group}:");
        let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
        let (names, values) = (rows.next(), rows.next());
        let (names, values) =
            names.zip(values).unwrap_or_else(|| panic!("no {group} rows in /proc/net/snmp or netstat:\n{text}"));
        let at = names.split_whitespace().position(|n| n == name).unwrap_or_else(|| panic!("no {group} {name}"));
        values.split_whitespace().nth(at).and_then(|v| v.parse().ok()).expect("numeric SNMP counter")
    }

    /// One counter of the receiver's veth end.
    pub fn receiver_if_counter(&self, counter: &str) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/{counter}", self.receiver_if());
        let out = self.cmd(&self.receiver_ns(), "cat", &[&path]).output().expect("cat counter");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("numeric interface counter")
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(script()).args(["down", "--name", &self.name]).output();
    }
}

/// A running `uringbench recv`; killed (never left behind) when dropped.
pub struct Recv(Option<Child>);

impl Recv {
    /// Its process id (wrappers like `ip netns exec` and `setpriv` exec, so it is uringbench's).
    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("recv child").id()
    }
    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.0.as_mut().is_some_and(|c| c.try_wait().expect("try_wait").is_none())
    }
    /// Waits for it to exit by itself (bounded) and returns its output.
    pub fn finish(mut self, limit: Duration) -> Output {
        finish(self.0.take().expect("recv child"), limit)
    }
    /// Kills it and returns what it printed.
    pub fn kill(mut self) -> Output {
        let mut child = self.0.take().expect("recv child");
        let _ = child.kill();
        child.wait_with_output().expect("recv output")
    }
    pub fn kill_now(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Runs a command to completion, killing it after `limit`; returns its output and run time.
pub fn run_bounded(mut c: Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let status = child.wait().expect("wait after kill");
            let out = Output { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() };
            panic!(
                "command did not finish within {:?} (hang): stdout {} stderr {}",
                limit,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    (Output { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() }, elapsed)
}

/// Waits for a child (bounded) and returns its output.
pub fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("process did not exit within {limit:?}: {}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many entries /proc/PID/WHAT has (`task`: threads, `fd`: descriptors); a failed read
/// panics rather than reading as 0.
pub fn proc_entries(pid: u32, what: &str) -> usize {
    let dir = format!("/proc/{pid}/{what}");
    std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {dir}: {e}")).count()
}

/// User + system CPU seconds the kernel has charged process `pid` so far (/proc/PID/stat).
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    // Fields after the command name (which may hold spaces) end with ')': utime and stime are
    // fields 14 and 15, the 12th and 13th after it.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or_else(|| panic!("{path}: {text}"));
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn u64_at(v: &serde_json::Value, path: &str) -> u64 {
    v.pointer(path).and_then(|x| x.as_u64()).unwrap_or_else(|| panic!("missing integer at {path} in {v}"))
}

pub fn f64_at(v: &serde_json::Value, path: &str) -> f64 {
    v.pointer(path).and_then(|x| x.as_f64()).unwrap_or_else(|| panic!("missing number at {path} in {v}"))
}

/// The figure an HTML page (`--html`, `report --html`) shows as its headline: the number in
/// the `attr="..."` attribute of the element with `id="headline"`.
pub fn headline(html: &str, attr: &str) -> f64 {
    let at = html.find("id=\"headline\"").expect("a headline");
    let tag = &html[at..at + html[at..].find('>').unwrap()];
    let key = format!("{attr}=\"");
    let from = tag.find(&key).unwrap_or_else(|| panic!("headline without {attr}: {tag}")) + key.len();
    tag[from..from + tag[from..].find('"').unwrap()].parse().unwrap()
}

/// Whether a figure shown on a page is the JSON's: equal but for the last bit, since
/// serde_json reads floats to within one unit in the last place (no `float_roundtrip`).
pub fn same_figure(shown: f64, json: f64) -> bool {
    (shown - json).abs() <= shown.abs().max(json.abs()) * 1e-14
}

/// [`headline`] of the page a command wrote with `--html`.
pub fn page_headline(page: &std::path::Path, attr: &str) -> f64 {
    let html = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("--html wrote no {}: {e}", page.display()));
    headline(&html, attr)
}

/// Asserts a failed command's exit code and that its error is one line naming `needle`, no panic.
pub fn one_line_error(out: &std::process::Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "exit code for '{needle}': stderr {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "error must be one line, got:\n{stderr}");
    assert!(stderr.contains(needle), "error should mention '{needle}': {stderr}");
    assert!(!stderr.contains("panicked"), "no panics: {stderr}");
}

/// Runs `uringbench ARGS` without CAP_IPC_LOCK and with RLIMIT_MEMLOCK = `bytes`, as an
/// unprivileged user would (root's capability otherwise lifts the limit).
pub fn low_memlock(pair: &NetnsPair, ns: &str, bytes: &str, args: &[&str]) -> std::process::Output {
    let limit = format!("--memlock={bytes}:{bytes}");
    let mut all = vec!["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "prlimit", limit.as_str(), bin()];
    all.extend_from_slice(args);
    run_bounded(pair.cmd(ns, "setpriv", &all), Duration::from_secs(30)).0
}

/// Asserts that `doc` validates against the published JSON Schema `name` (docs/schema/).
pub fn assert_matches_schema(doc: &serde_json::Value, name: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/schema").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: serde_json::Value = serde_json::from_str(&text).expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = validator.iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path)).collect();
    assert!(errors.is_empty(), "the document against {name}: {errors:#?}\n{doc}");
}
