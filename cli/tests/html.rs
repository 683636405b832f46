//! `report --html` in a real browser: a short 4-queue run across the netns pair (which also
//! writes its own page with `send --html`), its page loaded by headless Chromium from file://, and asserted from the DOM the browser built and
//! from a screenshot: one line per queue the JSON has, axis labels with units, the headline
//! equal to the JSON's receiver rate, no console error, and pixels that are not all one colour.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Debian's `chromium` (scripts/install-deps.sh --test), or another name for the same browser.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// Runs the browser headless on `page` with `extra` arguments; returns stdout and stderr.
fn browse(browser: &str, profile: &Path, page: &Path, extra: &[&str]) -> (String, String) {
    let mut c = Command::new(browser);
    c.args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()));
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    assert!(out.status.success(), "{browser} failed: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The console errors Chromium logs to stderr (`CONSOLE(...)` lines, uncaught exceptions).
fn console_errors(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("CONSOLE") || l.contains("Uncaught")).collect()
}

/// A fresh folder for one test's pages and browser profile.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The standard deviation of the screenshot's grey levels (0 for a page of one colour).
fn pixel_spread(png_path: &Path) -> f64 {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).expect("screenshot"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "8-bit screenshot");
    let grey: Vec<f64> =
        buf[..info.buffer_size()]
            .chunks(channels)
            .map(|p| {
                if channels >= 3 {
                    (f64::from(p[0]) + f64::from(p[1]) + f64::from(p[2])) / 3.0
                } else {
                    f64::from(p[0])
                }
            })
            .collect();
    let mean = grey.iter().sum::<f64>() / grey.len() as f64;
    (grey.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / grey.len() as f64).sqrt()
}

/// The text of every element with `class="axis-label"` in the DOM.
fn axis_labels(dom: &str) -> Vec<&str> {
    dom.match_indices("class=\"axis-label\"")
        .map(|(i, _)| {
            let rest = &dom[i..];
            let start = rest.find('>').expect("tag end") + 1;
            &rest[start..start + rest[start..].find('<').expect("text end")]
        })
        .collect()
}

#[test]
fn run_page_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        return skip(Lacking::Installed, "chromium not installed (scripts/install-deps.sh --test)");
    };
    let dir = scratch("html");
    let doc = {
        let _serial = serial();
        let pair = NetnsPair::up("uoht");
        let recv = pair.spawn_recv(&["--once", "--cpus", "1"]);
        let sent_page = dir.join("send.html").display().to_string();
        let (out, _) = pair.send(
            &[
                "--target", RECV_ADDR, "-P", "4", "-t", "2", "--warmup", "300ms", "-i", "500ms", "-J", "--cpus", "0",
                "--html", &sent_page,
            ],
            Duration::from_secs(30),
        );
        recv.finish(Duration::from_secs(10));
        assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
        json(&out)
    };
    let (run, page) = (dir.join("run.json"), dir.join("run.html"));
    std::fs::write(&run, doc.to_string()).unwrap();
    let mut c = Command::new(bin());
    c.arg("report").arg(&run).arg("--html").arg(&page);
    let (out, _) = run_bounded(c, Duration::from_secs(30));
    assert!(out.status.success(), "report --html: {}", String::from_utf8_lossy(&out.stderr));

    // `send --html` wrote the page of the same run: the same figures as `report --html` draws.
    let sent = std::fs::read_to_string(dir.join("send.html")).expect("send --html wrote its page");
    let drawn = std::fs::read_to_string(&page).unwrap();
    for needle in ["data-key=\"queue-", "<figure", "(exact match)"] {
        assert_eq!(sent.matches(needle).count(), drawn.matches(needle).count(), "{needle}");
    }

    let profile = dir.join("profile");
    let (dom, stderr) = browse(browser, &profile, &page, &["--dump-dom"]);
    assert!(console_errors(&stderr).is_empty(), "console errors: {:?}", console_errors(&stderr));
    assert!(dom.contains("</html>"), "the browser built the page: {}", &dom[..dom.len().min(300)]);
    every_figure_footnoted("run", &dom);

    // The SUM line with a point per interval, and one line per queue the JSON counted.
    let queues = doc["queues"].as_array().expect("queues[]").len();
    assert_eq!(queues, 4);
    let figure = |id: &str| {
        let f = &dom[dom.find(&format!("id=\"fig-{id}\"")).unwrap_or_else(|| panic!("figure {id}"))..];
        &f[..f.find("</figure>").unwrap()]
    };
    assert_eq!(figure("queues").matches("class=\"series\" data-key=\"queue-").count(), queues, "one line per queue");
    let intervals = doc["intervals"].as_array().unwrap().len();
    let sum = format!("class=\"series\" data-key=\"sum\" data-name=\"received (SUM)\" data-points=\"{intervals}\"");
    assert_eq!(figure("throughput").matches(&sum).count(), 1, "the SUM line, a point per interval");

    // CPU per side over time (each side's host and queue threads, a point per interval), and
    // per core (a line per CPU of each side's host), from intervals[].cpu. The intervals tile
    // the window, so the receiver's per-interval busy time adds up to the window's.
    for side in ["sender", "receiver"] {
        for key in ["host", "threads"] {
            let want = format!("data-key=\"{side}-{key}\" data-name=");
            let f = figure("cpu-sides");
            let at = f.find(&want).unwrap_or_else(|| panic!("{side}-{key} in the CPU chart"));
            assert!(f[at..].contains(&format!("data-points=\"{intervals}\"")), "{side}-{key}: a point per interval");
        }
        let cpus = doc["intervals"][0]["cpu"][side]["host"].as_array().expect("intervals[].cpu").len();
        assert_eq!(cpus, doc["cpu"][side]["host"].as_array().unwrap().len(), "{side}: every host CPU");
        if cpus <= 16 {
            let lines = figure(&format!("cpu-cores-{side}")).matches(&format!("data-key=\"{side}-cpu-")).count();
            assert_eq!(lines, cpus, "{side}: a line per CPU");
        }
    }
    let busy: f64 = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|iv| {
            let secs = iv["end"].as_f64().unwrap() - iv["start"].as_f64().unwrap();
            let host = iv["cpu"]["receiver"]["host"].as_array().unwrap();
            host.iter().map(|h| h["utilization"].as_f64().unwrap() * secs).sum::<f64>()
        })
        .sum();
    let window_busy = f64_at(&doc, "/cpu/receiver/host_busy_seconds");
    assert!(window_busy > 0.0, "moving data costs the receiver CPU");
    // Each interval's utilization is its busy ticks over the CPU's own ticks (10 ms each), taken
    // over the interval's wall seconds, and the sampler's reads of /proc/stat lag its clock
    // when the host is loaded: 1.2% and 3.6% apart in two runs beside the whole suite and
    // builds (tiling errors would be whole intervals, 20% and more here).
    let allowed = 0.03 + 0.05 * window_busy;
    assert!((busy - window_busy).abs() < allowed, "intervals' busy {busy:.3} s, window's {window_busy:.3} s");

    // Every axis says its unit: `quantity (unit)`.
    let labels = axis_labels(&dom);
    assert!(labels.len() >= 4, "{labels:?}");
    for l in &labels {
        assert!(l.ends_with(')') && l.contains(" ("), "axis label without a unit: {l:?}");
    }
    assert!(labels.iter().any(|l| l.ends_with("bit/s)")), "{labels:?}");

    // The headline is the receiver's rate from the JSON.
    let (shown, want) = (headline(&dom, "data-bits-per-second"), f64_at(&doc, "/sum/receiver/bits_per_second"));
    assert!(same_figure(shown, want), "headline {shown}, JSON {want}");
    assert!(dom.contains("(exact match)"), "a clean TCP test matches to the byte");

    let shot = dir.join("run.png");
    let (_, stderr) =
        browse(browser, &profile, &page, &[&format!("--screenshot={}", shot.display()), "--window-size=1000,1400"]);
    assert!(console_errors(&stderr).is_empty(), "console errors: {:?}", console_errors(&stderr));
    let spread = pixel_spread(&shot);
    assert!(spread > 20.0, "the screenshot looks blank (grey-level spread {spread:.1})");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A saved document of the previous release, as `engine/tests/fixtures/` keeps it.
fn fixture(name: &str) -> (PathBuf, serde_json::Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../engine/tests/fixtures/53b0d44/{name}.json"));
    let doc = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (path, doc)
}

/// Every figure in the DOM has a footnote that says what it measures (not empty).
fn every_figure_footnoted(name: &str, dom: &str) {
    let figures: Vec<&str> = dom.split("<figure").skip(1).map(|f| &f[..f.find("</figure>").unwrap()]).collect();
    // A run saved with one interval has no chart over time, and says so.
    assert!(!figures.is_empty() || dom.contains("class=\"no-over-time\""), "{name}: a figure");
    for f in figures {
        let note = &f[f.find("<figcaption>").unwrap_or_else(|| panic!("{name}: a figure without footnote"))..];
        assert!(note.len() > "<figcaption>".len() + 40, "{name}: a footnote too short to say anything: {note}");
    }
}

/// What a page must draw, counted in its JSON: (needle in the DOM, how many times).
type Want = fn(&serde_json::Value) -> Vec<(String, usize)>;

/// A headline's attribute and where the JSON holds its figure.
type Headline = Option<(&'static str, &'static str)>;

fn points(key: &str, name: &str, n: usize) -> (String, usize) {
    (format!("data-key=\"{key}\" data-name=\"{name}\" data-points=\"{n}\""), 1)
}

/// Every other kind of page, from saved documents (no traffic): each loads without a console
/// error, draws what its JSON holds, shows the JSON's headline, footnotes every figure, and is
/// not blank.
#[test]
fn every_page_kind_loads_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        return skip(Lacking::Installed, "chromium not installed (scripts/install-deps.sh --test)");
    };
    let dir = scratch("html-kinds");
    let profile = dir.join("profile");
    // (document, what it draws, the headline's attribute and where the JSON holds its figure)
    let kinds: [(&str, Want, Headline); 8] = [
        // A point per swept value on each of its two series (Gbit/s, CPU-s/GB).
        ("sweep", |d| vec![("data-x=".into(), d["points"].as_array().unwrap().len() * 2)], None),
        ("compare", |d| vec![("class=\"comparison\"".into(), d["comparisons"].as_array().unwrap().len())], None),
        (
            "experiment",
            |d| {
                let runs = d["variants"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v["runs"].as_array().unwrap().len())
                    .sum::<usize>();
                vec![
                    ("class=\"comparison\"".into(), d["compare"]["comparisons"].as_array().unwrap().len()),
                    ("data-x=".into(), runs + 4),
                ]
            },
            None,
        ),
        // Saved without -i: one interval, the window, and no chart over time for it.
        (
            "rr",
            |d| {
                assert_eq!(d["intervals"].as_array().unwrap().len(), 1, "the fixture has the window only");
                vec![("One interval, the whole window,".into(), 1), ("id=\"plot-transactions\"".into(), 0)]
            },
            Some(("data-transactions-per-second", "/transactions_per_second")),
        ),
        (
            "stream-udp",
            |d| {
                assert_eq!(d["intervals"].as_array().unwrap().len(), 1, "the fixture has the window only");
                vec![("One interval, the whole window,".into(), 1), ("data-key=\"lost\"".into(), 0)]
            },
            Some(("data-bits-per-second", "/sum/receiver/bits_per_second")),
        ),
        (
            "search",
            |d| {
                let steps = d["steps"].as_array().unwrap();
                let passed = steps.iter().filter(|t| t["passed"] == true).count();
                vec![
                    points("passed", "passed", passed),
                    points("failed", "failed", steps.len() - passed),
                    points("asked", "rate asked", steps.len()),
                    ("class=\"trial\"".into(), steps.len()),
                ]
            },
            Some(("data-bits-per-second", "/rate_bps")),
        ),
        // Six latency percentiles; a row per status code; a saved document without intervals.
        (
            "http",
            |d| {
                vec![
                    ("data-x=".into(), 6),
                    ("<th>status ".into(), d["status"].as_object().unwrap().len()),
                    ("No intervals in this document".into(), usize::from(d.get("intervals").is_none())),
                ]
            },
            Some(("data-transactions-per-second", "/transactions_per_second")),
        ),
        // A row per failed run; a cell per planned pair.
        (
            "fleet",
            |d| {
                vec![
                    ("class=\"failed-run\"".into(), d["failed_runs"].as_array().unwrap().len()),
                    ("class=\"cell\"".into(), d["pairs"].as_array().unwrap().len()),
                ]
            },
            None,
        ),
    ];
    for (name, want, head) in kinds {
        let (path, doc) = fixture(name);
        let page = dir.join(format!("{name}.html"));
        let mut c = Command::new(bin());
        c.arg("report").arg(&path).arg("--html").arg(&page);
        let (out, _) = run_bounded(c, Duration::from_secs(30));
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let (dom, stderr) = browse(browser, &profile, &page, &["--dump-dom"]);
        assert!(console_errors(&stderr).is_empty(), "{name}: console errors: {:?}", console_errors(&stderr));
        every_figure_footnoted(name, &dom);
        // A run's page draws no chart over time from fewer than two intervals (an empty
        // frame, one dot); a search's or a sweep's points are not over time.
        if ["rr", "stream-udp", "http"].contains(&name) {
            for lonely in ["data-points=\"0\"", "data-points=\"1\""] {
                assert!(!dom.contains(lonely), "{name}: a line of {lonely}");
            }
        }
        for (needle, count) in want(&doc) {
            assert_eq!(dom.matches(&needle).count(), count, "{name}: {needle}");
        }
        if let Some((attr, pointer)) = head {
            let (shown, want) = (headline(&dom, attr), f64_at(&doc, pointer));
            assert!(same_figure(shown, want), "{name}: headline {shown}, JSON {want}");
        }
        let shot = dir.join(format!("{name}.png"));
        browse(browser, &profile, &page, &[&format!("--screenshot={}", shot.display()), "--window-size=1000,1000"]);
        let spread = pixel_spread(&shot);
        assert!(spread > 20.0, "{name}: the screenshot looks blank (grey-level spread {spread:.1})");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A keep-alive HTTP/1.1 server on loopback answering every request with `ok`, for as long as
/// the test process lives (its threads end with the client's connections).
fn tiny_http_server() -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// `http --html` of a real run on loopback: the page draws a point per interval the JSON has
/// on the requests/s line, on the p50 and p99 latency lines (intervals with a response) and on
/// the client's CPU lines, loads without a console error, and footnotes every figure.
#[test]
fn http_page_over_time_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        return skip(Lacking::Installed, "chromium not installed (scripts/install-deps.sh --test)");
    };
    let dir = scratch("html-http");
    let page = dir.join("http.html");
    let doc = {
        let _serial = serial();
        let url = format!("http://{}/", tiny_http_server());
        let mut c = Command::new(bin());
        c.args(["http", &url, "-c", "2", "-t", "2", "-d", "2s", "-i", "400ms", "-J", "--html"]).arg(&page);
        let (out, _) = run_bounded(c, Duration::from_secs(30));
        assert!(out.status.success(), "http: {}", String::from_utf8_lossy(&out.stderr));
        json(&out)
    };
    let intervals = doc["intervals"].as_array().expect("intervals[]");
    assert_eq!(intervals.len(), 5, "2 s in 400 ms intervals");
    let answered = intervals.iter().filter(|iv| iv["requests"].as_u64().unwrap() > 0).count();
    let with_cpu = intervals.iter().filter(|iv| iv["cpu"].is_object()).count();
    let profile = dir.join("profile");
    let (dom, stderr) = browse(browser, &profile, &page, &["--dump-dom"]);
    assert!(console_errors(&stderr).is_empty(), "console errors: {:?}", console_errors(&stderr));
    every_figure_footnoted("http", &dom);
    for (needle, count) in [
        points("requests", "requests/s", intervals.len()),
        points("p50", "p50 latency", answered),
        points("p99", "p99 latency", answered),
        points("client-host", "client host, all CPUs", with_cpu),
        points("client-threads", "client queue threads", with_cpu),
    ] {
        assert_eq!(dom.matches(&needle).count(), count, "{needle}");
    }
    assert!(!dom.contains("No intervals in this document"), "this document has intervals");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 1,024-flow, 600-interval run (a saved run widened to that size): the page draws the
/// queues as one min/median/max band, the host's 64 CPUs per side as a band too, and opens,
/// laid out, in under a second. The time is the page's own: a wrapper page (the test's, not
/// the report's) loads it in a frame and reads the clock at its load, after forcing layout.
#[test]
fn a_1024_flow_page_draws_bands_and_opens_in_under_a_second() {
    let Some(browser) = chromium() else {
        return skip(Lacking::Installed, "chromium not installed (scripts/install-deps.sh --test)");
    };
    let dir = scratch("html-wide");
    let (_, mut doc) = fixture("stream-tcp");
    let cpu = |busy: f64| {
        let host: Vec<serde_json::Value> =
            (0..64).map(|c| serde_json::json!({"cpu": c, "utilization": busy, "softirq": busy / 4.0})).collect();
        serde_json::json!({"host": host, "threads": busy * 8.0})
    };
    let template = doc["intervals"][0].clone();
    let intervals: Vec<serde_json::Value> = (0..600)
        .map(|n| {
            let mut iv = template.clone();
            let queues: Vec<u64> = (0..1024u64).map(|q| 1_000_000 + (q * 7919 + n * 31) % 5000 * 100).collect();
            let bytes: u64 = queues.iter().sum();
            iv["start"] = (n as f64 * 0.1).into();
            iv["end"] = ((n + 1) as f64 * 0.1).into();
            iv["bytes"] = bytes.into();
            iv["bits_per_second"] = (bytes as f64 * 80.0).into();
            iv["queues"] = queues.into();
            iv["tcp_flows"] = serde_json::Value::Null;
            iv["cpu"] = serde_json::json!({"sender": cpu(0.5), "receiver": cpu(0.7)});
            iv
        })
        .collect();
    doc["intervals"] = intervals.into();
    doc["test"]["queues"] = 1024.into();
    let (json, page) = (dir.join("wide.json"), dir.join("wide.html"));
    std::fs::write(&json, doc.to_string()).unwrap();
    let mut c = Command::new(bin());
    c.arg("report").arg(&json).arg("--html").arg(&page);
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    assert!(out.status.success(), "report --html: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("data-key=\"queue-").count(), 0, "no line per queue");
    assert_eq!(html.matches("class=\"band\" data-series=\"1024\"").count(), 1, "the queues' band");
    assert_eq!(html.matches("class=\"band\" data-series=\"64\"").count(), 2, "each side's CPUs' band");

    let wrapper = dir.join("open.html");
    std::fs::write(
        &wrapper,
        "<!DOCTYPE html><html><body><p id=\"t\">not loaded</p><script>\n\
         const f = document.createElement('iframe'); f.style.width = '1000px'; f.style.height = '800px';\n\
         const t0 = performance.now();\n\
         f.onload = () => { const d = f.contentDocument; const h = d.body.getBoundingClientRect().height;\n\
           document.getElementById('t').textContent = 'ms=' + (performance.now() - t0).toFixed(0) + ' svg=' + d.querySelectorAll('svg').length + ' h=' + h.toFixed(0); };\n\
         f.src = 'wide.html'; document.body.appendChild(f);\n</script></body></html>\n",
    )
    .unwrap();
    let (dom, stderr) =
        browse(browser, &dir.join("profile"), &wrapper, &["--dump-dom", "--allow-file-access-from-files"]);
    assert!(console_errors(&stderr).is_empty(), "console errors: {:?}", console_errors(&stderr));
    let at = dom.find("ms=").unwrap_or_else(|| panic!("the page did not load: {dom}"));
    let fields: Vec<f64> =
        dom[at..].split(['<', ' ']).take(3).map(|f| f.split('=').nth(1).unwrap().parse().unwrap()).collect();
    let (ms, svgs, height) = (fields[0], fields[1], fields[2]);
    eprintln!("1,024 flows × 600 intervals: {} bytes, opened and laid out in {ms} ms", html.len());
    assert_eq!(svgs as usize, html.matches("<svg").count(), "every chart is in the DOM");
    assert!(height > 2000.0, "laid out: {height} px");
    assert!(ms < 1000.0, "opened in {ms} ms");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example pages in docs/examples/ are what this build renders from the documents beside
/// them (scripts/html-examples.sh regenerates them).
#[test]
fn example_pages_match_this_build() {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let dir = scratch("html-examples");
    let mut checked = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&examples).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for json in entries.iter().filter(|p| p.extension().is_some_and(|x| x == "json")) {
        let page = dir.join("page.html");
        let mut c = Command::new(bin());
        c.current_dir(examples.join("../..")).arg("report");
        c.arg(Path::new("docs/examples").join(json.file_name().unwrap())).arg("--html").arg(&page);
        let (out, _) = run_bounded(c, Duration::from_secs(30));
        assert!(out.status.success(), "{}: {}", json.display(), String::from_utf8_lossy(&out.stderr));
        let committed = std::fs::read_to_string(json.with_extension("html")).unwrap_or_else(|e| {
            panic!("{}: {e} (run scripts/html-examples.sh)", json.with_extension("html").display())
        });
        assert!(
            std::fs::read_to_string(&page).unwrap() == committed,
            "{} is stale: run scripts/html-examples.sh and commit the pages",
            json.with_extension("html").display()
        );
        checked += 1;
    }
    assert!(checked >= 7, "the examples: a run, rr/crr, http, a search, a sweep, an experiment, a fleet");
    let _ = std::fs::remove_dir_all(&dir);
}
