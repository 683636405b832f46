//! Nothing lost on write, and statistics that can say yes and no, tried on real runs between
//! two namespaces. The filesystem is the witness for the writes: a full tmpfs and /dev/full
//! refuse the output, and what is left under each final name is read back; the receiver's
//! interface counters are the witness that the compared runs really differ.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A 16 KiB tmpfs mounted for one test, unmounted (and its folder removed) when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ub-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "mount tmpfs: {}", String::from_utf8_lossy(&out.stderr));
        SmallFs(dir)
    }

    /// Empties it, then fills it but for `free` bytes (whole 4 KiB pages).
    fn leave_free(&self, free: usize) {
        for e in std::fs::read_dir(&self.0).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        std::fs::write(self.0.join("filler"), vec![0u8; 16 * 1024 - free]).unwrap();
    }

    /// The names in it other than the filler.
    fn left(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "filler")
            .collect();
        names.sort();
        names
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `send ARGS` in the sender namespace with stdout going to `stdout`; waited for (bounded).
fn send_to(pair: &NetnsPair, args: &[&str], stdout: Stdio) -> Output {
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["send", "--target", RECV_ADDR, "-t", "0.3", "--warmup", "0"]);
    c.args(args).stdout(stdout).stderr(Stdio::piped());
    let child = c.spawn().expect("spawn send");
    finish(child, Duration::from_secs(20))
}

/// A failed write: exit 1, one error line naming `what` and the error last on stderr, and the
/// run's headline (its received rate) on stderr before it.
fn lost_nothing(out: &Output, what: &str, error: &str, case: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{case}: exit code; stderr {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("writing ")).collect();
    assert_eq!(errors.len(), 1, "{case}: one error line, got:\n{stderr}");
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    assert!(last.contains(&format!("writing {what}: {error}")), "{case}: last line names {what}: {stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("uringbench: result: ") && l.contains("received")),
        "{case}: the headline stays on stderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{case}: {stderr}");
}

#[test]
fn writes_onto_a_full_tmpfs_or_dev_full_exit_1_and_leave_no_partial_file() {
    let _serial = serial();
    let pair = NetnsPair::up("ubwr");
    let _recv = pair.spawn_recv(&[]);
    let fs = SmallFs::mount("writes");
    const ENOSPC: &str = "No space left on device";

    // Stdout redirected to a file with 4 KiB free: a -J document (about 10 KiB) and a
    // --json-stream (about 9 KiB) do not fit; text with the disk full does not either. What
    // was written is cut back: the file the shell made is left empty, not half a document.
    for (case, args, free) in [("-J", &["-J"][..], 4096), ("--json-stream", &["--json-stream"], 4096), ("text", &[], 0)]
    {
        fs.leave_free(free);
        let file = std::fs::File::create(fs.path("out")).unwrap();
        let out = send_to(&pair, args, Stdio::from(file));
        lost_nothing(&out, "stdout", ENOSPC, case);
        assert_eq!(std::fs::metadata(fs.path("out")).unwrap().len(), 0, "{case}: no partial output left");
    }

    // Files the command names: written beside, renamed only when whole. With 4 KiB free, a
    // -J log (appended to an existing log, about 10 KiB) and an HTML page do not fit: the
    // final name keeps what it had (the old log) or never appears, and no temporary is left.
    let log = fs.path("log.json");
    let page = fs.path("page.html");
    for (case, args, name) in [
        ("--logfile", vec!["-J", "--logfile", log.to_str().unwrap()], "log.json"),
        ("--html", vec!["--html", page.to_str().unwrap()], "page.html"),
    ] {
        // The old log takes a page of the 8 KiB left, its copy beside it the other.
        fs.leave_free(if name == "log.json" { 8192 } else { 4096 });
        if name == "log.json" {
            std::fs::write(&log, "earlier log\n").unwrap();
        }
        let out = send_to(&pair, &args, Stdio::null());
        lost_nothing(&out, fs.path(name).to_str().unwrap(), ENOSPC, case);
        if name == "log.json" {
            assert_eq!(std::fs::read_to_string(&log).unwrap(), "earlier log\n", "{case}: the old log is kept whole");
            assert_eq!(fs.left(), ["log.json"], "{case}: no temporary file left");
        } else {
            assert!(fs.left().is_empty(), "{case}: nothing under the final name, no temporary: {:?}", fs.left());
        }
    }
    // With room, the same commands write their files whole (the temporary renamed over it).
    fs.leave_free(16 * 1024);
    let out = send_to(&pair, &["-J", "--logfile", log.to_str().unwrap()], Stdio::null());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&log).unwrap()).expect("the log is whole JSON");
    assert!(doc["sum"]["receiver"]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(fs.left(), ["log.json"]);

    // /dev/full: text, -J and --json-stream on stdout, and as --logfile / --html (written to
    // as the device it is: renaming over it would replace /dev/full).
    for (case, args) in [
        ("text", vec![]),
        ("-J", vec!["-J"]),
        ("--json-stream", vec!["--json-stream"]),
        ("--logfile", vec!["--logfile", "/dev/full"]),
        ("--html", vec!["--html", "/dev/full"]),
    ] {
        let dev_full = std::fs::File::options().write(true).open("/dev/full").unwrap();
        let stdout =
            if case.starts_with("--") && case != "--json-stream" { Stdio::null() } else { Stdio::from(dev_full) };
        let out = send_to(&pair, &args, stdout);
        let what = if case == "--logfile" || case == "--html" { "/dev/full" } else { "stdout" };
        lost_nothing(&out, what, ENOSPC, &format!("/dev/full {case}"));
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/full").unwrap().file_type().is_char_device(), "/dev/full is still the device");
}

#[test]
fn writes_a_closed_pipe_ends_the_test_at_once() {
    let _serial = serial();
    let pair = NetnsPair::up("ubwp");
    let _recv = pair.spawn_recv(&[]);
    // `send | head -1`: a 10 s test whose reader takes the first line and goes.
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["send", "--target", RECV_ADDR, "-t", "10"]);
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    reader.read_line(&mut first).unwrap();
    assert!(!first.trim().is_empty(), "a first line: {first:?}");
    drop(reader);
    let closed = Instant::now();
    let out = finish(child, Duration::from_secs(15));
    let took = closed.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(took < Duration::from_secs(1), "the test went on {took:?} after its reader left: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.trim_end().ends_with("writing stdout: Broken pipe (os error 32)"), "{stderr}");
}

/// `send ... --repeat N -J` into `path`, and the bytes the receiver's interface took meanwhile.
fn runs(pair: &NetnsPair, path: &Path, n: &str, extra: &[&str]) -> u64 {
    let before = pair.receiver_if_counter("rx_bytes");
    let mut args = vec!["--target", RECV_ADDR, "-t", "0.3", "--warmup", "0", "--repeat", n, "-J"];
    args.extend_from_slice(extra);
    let (out, _) = pair.send(&args, Duration::from_secs(30));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(path, &out.stdout).unwrap();
    pair.receiver_if_counter("rx_bytes") - before
}

/// `compare A B -J`: the primary comparison (operands: files, or NAME=FILE,FILE...).
fn compared(a: &str, b: &str) -> serde_json::Value {
    let out = Command::new(bin()).args(["compare", "-J", a, b]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    doc["comparisons"].as_array().unwrap().iter().find(|c| c["metric"] == "received_gbps").unwrap().clone()
}

#[test]
fn compare_real_runs_says_yes_to_a_real_difference_and_no_to_none() {
    let _serial = serial();
    let pair = NetnsPair::up("ubws");
    let _recv = pair.spawn_recv(&[]);
    let dir = std::env::temp_dir().join(format!("ub-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: String| dir.join(name).to_str().unwrap().to_string();
    // 3 against 3, the two kinds of run taking turns so a busy moment of the shared CPUs hits
    // both. The receiver's interface says whether -w 64K really carried less; this machine
    // can be busy enough that it did not (a default run as slow as a 64K one), and then the
    // runs are made again, at most twice.
    let mut shown = None;
    for _ in 0..2 {
        let (mut base_bytes, mut small_bytes) = (0, 0);
        for i in 0..3 {
            base_bytes += runs(&pair, Path::new(&file(format!("base{i}.json"))), "1", &[]);
            small_bytes += runs(&pair, Path::new(&file(format!("w64k{i}.json"))), "1", &["-w", "64K"]);
        }
        let operand = |name: &str| {
            format!("{name}={}", (0..3).map(|i| file(format!("{name}{i}.json"))).collect::<Vec<_>>().join(","))
        };
        let c = compared(&operand("base"), &operand("w64k"));
        if base_bytes > 2 * small_bytes {
            shown = Some(c);
            break;
        }
        eprintln!("-w 64K did not limit the runs here: {base_bytes} vs {small_bytes} bytes received; again");
    }
    let c =
        shown.expect("two tries without -w 64K limiting the runs (the receiver's counters): the test bed is too busy");
    assert_eq!(c["significant"], true, "{c}");
    assert_eq!(c["test"], "welch_log_t", "3 a side: the rank test cannot decide, Welch's does: {c}");
    assert!(c["verdict"].as_str().unwrap().contains("slower than base"), "{c}");
    // 5 against 5 of one command: no difference. A true null is called a difference at the
    // 5% level about 3% of the time (the rank test at 5 a side), so a second draw settles it:
    // twice in a row happens about once in a thousand.
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    let mut called_different = Vec::new();
    for _ in 0..2 {
        runs(&pair, &a, "5", &[]);
        runs(&pair, &b, "5", &[]);
        let c = compared(a.to_str().unwrap(), b.to_str().unwrap());
        assert_eq!(c["test"], "mann_whitney", "{c}");
        if c["significant"] == false {
            assert!(c["verdict"].as_str().unwrap().starts_with("no significant difference"), "{c}");
            break;
        }
        called_different.push(c["verdict"].to_string());
    }
    assert!(called_different.len() < 2, "one command called different from itself twice: {called_different:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
