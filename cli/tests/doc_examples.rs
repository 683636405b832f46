//! The examples marked runnable in README.md and docs/ (a ```` ```sh runnable ```` fence) run
//! between the netns pair, so they cannot rot: each `uringbench` line runs in the sender's
//! namespace against a receiver this test starts at 10.77.0.2 (lines that start a receiver,
//! `uringbench recv` or `uringbench -s`, are that receiver), and must exit 0 with a report.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One runnable command, where it was found.
struct Example {
    place: String,
    args: Vec<String>,
}

fn docs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The commands of every runnable fence; a line of such a fence that is not a uringbench
/// command is a mistake in the docs.
fn runnable(file: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut out = Vec::new();
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        let place = format!("{}:{}", file.file_name().unwrap_or_default().to_string_lossy(), n + 1);
        let trimmed = line.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            inside = !inside && info.split_whitespace().collect::<Vec<_>>() == ["sh", "runnable"];
            continue;
        }
        if !inside {
            continue;
        }
        let command = trimmed.split(" #").next().unwrap_or_default().trim();
        if command.is_empty() || command.starts_with('#') {
            continue;
        }
        assert!(
            !command.contains(['\'', '"', '|', '>', '<', '$', '&', ';']),
            "{place}: keep runnable examples plain: {command}"
        );
        let words: Vec<String> = command.split_whitespace().map(String::from).collect();
        assert_eq!(words[0], "uringbench", "{place}: a runnable fence holds uringbench commands only: {command}");
        if words.get(1).is_some_and(|w| w == "recv" || w == "-s") {
            continue; // the receiver this test runs
        }
        out.push(Example { place, args: words[1..].to_vec() });
    }
    assert!(!inside, "{}: a runnable fence is not closed", file.display());
    out
}

#[test]
fn runnable_examples_in_readme_and_docs_run() {
    let examples: Vec<Example> = docs().iter().flat_map(|f| runnable(f)).collect();
    assert!(examples.len() >= 4, "README and docs mark {} examples runnable", examples.len());
    // Short, because the machine is shared: a few seconds each.
    for e in &examples {
        if let Some(t) = e.args.iter().position(|a| a == "-t" || a == "--time").and_then(|i| e.args.get(i + 1)) {
            let secs: f64 = t.trim_end_matches('s').parse().unwrap_or(f64::MAX);
            assert!(secs <= 3.0, "{}: runnable examples run 3 s at most (-t {t})", e.place);
        }
    }
    let _serial = serial();
    let pair = NetnsPair::up("ubdx");
    let _recv = pair.spawn_recv(&[]);
    for e in &examples {
        let args: Vec<&str> = e.args.iter().map(String::as_str).collect();
        let (out, took) = run_bounded(pair.cmd(&pair.sender_ns(), bin(), &args), Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: uringbench {} exited {:?}\n{stdout}\n{}",
            e.place,
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.lines().count() >= 3, "{}: a report on stdout, got:\n{stdout}", e.place);
        assert!(took < Duration::from_secs(30), "{}: took {took:?}", e.place);
    }
}
