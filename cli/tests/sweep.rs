//! `uringbench sweep` across a netns pair: CSV with one row per run and summary rows per
//! point, an SVG that parses as XML with the expected series, saved JSON that `report`
//! re-renders to the same chart; and the usage errors.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Parses an SVG with Python's XML parser (strict: malformed XML raises) and returns, per
/// series id, the x labels of its points.
fn svg_series(path: &Path) -> serde_json::Value {
    let script = r#"
import json, sys, xml.etree.ElementTree as ET
ns = '{http://www.w3.org/2000/svg}'
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + 'svg', root.tag
out = {}
for g in root.iter(ns + 'g'):
    if g.get('class') == 'series':
        out[g.get('id')] = {'points': [c.get('data-x') for c in g.iter(ns + 'circle') if c.get('class') == 'point'],
                            'ranges': sum(1 for r in g.iter(ns + 'g') if r.get('class') == 'range'),
                            'axis': g.get('data-axis')}
print(json.dumps(out))
"#;
    let out = Command::new("python3").args(["-c", script]).arg(path).output().expect("python3");
    assert!(out.status.success(), "SVG does not parse as XML: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json from the parser script")
}

fn uringbench(args: &[&str]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.args(args);
    run_bounded(c, Duration::from_secs(30)).0
}

#[test]
fn sweep_over_queues_writes_csv_svg_and_json() {
    let _serial = serial();
    let pair = NetnsPair::up("uosw");
    let _recv = pair.spawn_recv(&["--cpus", "1"]);
    let dir = std::env::temp_dir().join(format!("uosw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, svg, saved) = (dir.join("q.csv"), dir.join("q.svg"), dir.join("q.json"));
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["sweep"]);
    c.args([
        "-c",
        RECV_ADDR,
        "-P",
        "1,2,3",
        "--repeat",
        "2",
        "-t",
        "600ms",
        "--warmup",
        "200ms",
        "--cooldown",
        "100ms",
    ])
    .args(["--cpus", "0", "--csv"])
    .arg(&csv)
    .arg("--svg")
    .arg(&svg)
    .arg("--json")
    .arg(&saved);
    let (out, _) = run_bounded(c, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "sweep failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("queues=")).count(), 6, "a progress line per run: {stdout}");
    // Where the series stands, on stderr (not a terminal here: a line per run).
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    for k in 1..=6 {
        assert!(stderr.contains(&format!("sweep: run {k} of 6, ")), "run {k} of 6 on stderr: {stderr}");
    }
    assert!(stderr.contains("sweep: run 6 of 6, ") && stderr.contains("about 0 s left"), "{stderr}");
    let order: Vec<&str> =
        stdout.lines().filter_map(|l| l.split(' ').next()).filter(|l| l.starts_with("queues=")).collect();
    assert_eq!(order, ["queues=1", "queues=2", "queues=3", "queues=1", "queues=2", "queues=3"], "runs are interleaved");

    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows[0].join(","), uringbench::sweep::SWEEP_CSV_HEADER);
    let runs: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == "run").collect();
    assert_eq!(runs.len(), 6, "3 points x 2 runs: {text}");
    for r in &runs {
        assert_eq!(r[5], "true", "every run complete: {r:?}");
        let bps: f64 = r[6].parse().expect("received bits/s");
        // A sanity bound two orders of magnitude below the 10-40 Gbit/s a veth carries here.
        assert!(bps > 1e8, "a veth carries more than 100 Mbit/s: {r:?}");
        assert!(r[8].parse::<f64>().expect("CPU-s/GB") > 0.0);
    }
    let medians: Vec<&str> = rows.iter().filter(|r| r[0] == "median").map(|r| r[2]).collect();
    assert_eq!(medians, ["1", "2", "3"], "one summary per point, in order");
    for kind in ["min", "mean", "max", "stdev"] {
        assert_eq!(rows.iter().filter(|r| r[0] == kind).count(), 3, "{kind} rows");
    }
    // The median row is the median of that point's runs.
    for point in ["1", "2", "3"] {
        let mut v: Vec<f64> = runs.iter().filter(|r| r[2] == point).map(|r| r[6].parse().unwrap()).collect();
        v.sort_by(f64::total_cmp);
        let median: f64 = rows.iter().find(|r| r[0] == "median" && r[2] == point).unwrap()[6].parse().unwrap();
        assert!((median - (v[0] + v[1]) / 2.0).abs() <= 1.0, "point {point}: {median} vs {v:?}");
    }

    let series = svg_series(&svg);
    for id in ["series-receiver_gbps", "series-cpu_s_per_gb"] {
        assert_eq!(series[id]["points"], serde_json::json!(["1", "2", "3"]), "{id}: {series}");
        assert_eq!(series[id]["ranges"], 3, "{id} has a min-max bar per point");
    }
    assert_eq!(series["series-cpu_s_per_gb"]["axis"], "right");

    // `report` re-renders the saved sweep to the same chart, and prints the table.
    let again = dir.join("again.svg");
    let out = uringbench(&["report", saved.to_str().unwrap(), "--svg", again.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Values in the chart carry 6 decimals, so the JSON round trip of the figures (which may
    // move the last bit of a double) leaves it byte for byte the same.
    assert!(
        std::fs::read_to_string(&again).unwrap() == std::fs::read_to_string(&svg).unwrap(),
        "report draws the same chart"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("sweep of queues against 10.77.0.2") && table.contains("2/2"), "{table}");

    // A saved `send -J` with intervals charts received Gbit/s per interval.
    let (out, _) = pair.send(
        &["-c", RECV_ADDR, "-t", "1s", "-i", "250ms", "--warmup", "200ms", "--cpus", "0", "-J"],
        Duration::from_secs(30),
    );
    assert!(out.status.success());
    let send_json = dir.join("send.json");
    std::fs::write(&send_json, &out.stdout).unwrap();
    let send_svg = dir.join("send.svg");
    let out = uringbench(&["report", send_json.to_str().unwrap(), "--svg", send_svg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).matches("[SUM]").count() >= 3);
    let series = svg_series(&send_svg);
    let points = series["series-receiver_gbps"]["points"].as_array().unwrap();
    assert!(points.len() >= 3, "an interval per 250 ms: {series}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sweep_and_report_usage_errors() {
    let garbage = std::env::temp_dir().join(format!("uosw-garbage-{}.json", std::process::id()));
    std::fs::write(&garbage, "{\"kind\": \"sweep\", \"schema_version\": 1, \"points\": 7}").unwrap();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../engine/tests/fixtures/53b0d44");
    let (run, sweep) = (format!("{fixtures}/stream-tcp.json"), format!("{fixtures}/sweep.json"));
    let page = std::env::temp_dir().join(format!("uosw-page-{}.html", std::process::id()));
    let page = page.to_str().unwrap();
    let cases: [&[&str]; 11] = [
        &["sweep", "-c", "10.77.0.2"],
        &["sweep", "-c", "10.77.0.2", "-P", "1,2", "-l", "1K,2K"],
        &["sweep", "-c", "10.77.0.2", "-P", "1,x"],
        &["sweep", "-c", "10.77.0.2", "-P", "0,2"],
        &["sweep", "-c", "10.77.0.2", "-P", "1,2", "--repeat", "0"],
        &["report", "/nonexistent/results.json"],
        &["report", garbage.to_str().unwrap()],
        // Several documents go on one page, and a sweep has a page of its own.
        &["report", &run, &run],
        &["report", &run, &run, "--html", page, "--svg", page],
        &["report", &sweep, &run, "--html", page],
        &["report", &format!("{fixtures}/rr.json"), &run, "--html", page],
    ];
    for args in cases {
        let out = uringbench(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    std::fs::remove_file(&garbage).unwrap();
    assert!(!Path::new(page).exists(), "no page is written for a refused command");
}

#[test]
fn report_names_the_files_it_wrote() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../engine/tests/fixtures/53b0d44");
    let dir = std::env::temp_dir().join(format!("uosw-wrote-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (page, svg) = (dir.join("one.html"), dir.join("one.svg"));
    let run = format!("{fixtures}/stream-tcp.json");
    let out = uringbench(&["report", &run, "--html", page.to_str().unwrap(), "--svg", svg.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.ends_with(&format!("wrote {}, {}\n", page.display(), svg.display())), "{text}");
    assert!(std::fs::metadata(&page).unwrap().len() > 1000 && std::fs::metadata(&svg).unwrap().len() > 100);
    // Two files on one page: each its own variant, no median pooled over them.
    let two = dir.join("two.html");
    let out = uringbench(&["report", &run, &format!("{fixtures}/repeat.json"), "--html", two.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("wrote {}\n", two.display()));
    let html = std::fs::read_to_string(&two).unwrap();
    assert!(html.contains("id=\"variants-note\"") && !html.contains("id=\"medians\""), "not pooled");
    assert_eq!(html.matches("class=\"medians\"").count(), 1, "the repeat file's own median only");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_receiver_that_goes_away_leaves_failed_runs_recorded() {
    let _serial = serial();
    let pair = NetnsPair::up("uosx");
    // `--once`: the receiver serves the first run and exits; every later run is refused.
    let recv = pair.spawn_recv(&["--once", "--cpus", "1"]);
    let dir = std::env::temp_dir().join(format!("uosx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("q.csv");
    let mut c = pair.cmd(&pair.sender_ns(), bin(), &["sweep"]);
    c.args(["-c", RECV_ADDR, "-P", "1,2", "--repeat", "2", "-t", "500ms", "--warmup", "100ms", "--cooldown", "50ms"])
        .args(["--cpus", "0", "--csv"])
        .arg(&csv);
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    let _ = recv.finish(Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1), "incomplete runs make the exit code 1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("some runs were incomplete"));
    let text = std::fs::read_to_string(&csv).unwrap();
    let runs: Vec<Vec<&str>> =
        text.lines().map(|l| l.split(',').collect()).filter(|r: &Vec<&str>| r[0] == "run").collect();
    assert_eq!(runs.len(), 4, "every run is recorded: {text}");
    assert_eq!(runs.iter().filter(|r| r[5] == "true").count(), 1, "only the first run found a receiver: {text}");
    assert!(runs.iter().filter(|r| r[5] == "false").all(|r| !r[9].is_empty()), "failed runs carry their error: {text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1/2") && stdout.contains("0/2"), "the table counts complete runs: {stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}
