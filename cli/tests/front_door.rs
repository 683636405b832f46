//! The command reaches the engine only through its front door (the names engine/src/lib.rs
//! re-exports), never through a layer path such as `uringbench::session::...`: a layer can then
//! be cut differently without touching the command. Reads the sources; moves no traffic.

use std::path::{Path, PathBuf};

/// The engine's layers: every `pub mod NAME;` of its lib.rs.
fn layers() -> Vec<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let layers: Vec<String> =
        text.lines().filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';').map(str::to_owned)).collect();
    assert!(layers.len() >= 10 && layers.iter().any(|l| l == "session"), "layers read from lib.rs: {layers:?}");
    layers
}

fn sources() -> Vec<PathBuf> {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![cli.join("build.rs")];
    let mut dirs = vec![cli.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The first path segments named after `uringbench::`, including each top-level segment of a
/// `uringbench::{a, b::c, ...}` group.
fn first_segments(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("uringbench::") {
        let line = text[..at].matches('\n').count() + 1;
        let rest = &text[at + "uringbench::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item) = (0, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.push((line, std::mem::take(&mut item)));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && c != '{' && c != '}' {
                    item.push(c);
                }
            }
            found.push((line, item));
        } else {
            found.push((line, rest.to_owned()));
        }
    }
    found
        .into_iter()
        .map(|(line, item)| {
            let item = item.trim_start();
            let end = item.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(item.len());
            let followed_by_path = item[end..].starts_with("::");
            (line, if followed_by_path { item[..end].to_owned() } else { String::new() })
        })
        .filter(|(_, s)| !s.is_empty())
        .collect()
}

#[test]
fn the_command_names_no_layer_path() {
    let layers = layers();
    let mut offences = Vec::new();
    let files = sources();
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, segment) in first_segments(&text) {
            if layers.contains(&segment) {
                offences.push(format!("{}:{line}: uringbench::{segment}::", file.display()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "layer paths in the command (re-export them in engine/src/lib.rs):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_scanner_sees_layer_paths_in_every_form() {
    let text = "use uringbench::session::server;\nuse uringbench::{Error, workload::{sweep, search}};\nlet x = uringbench::sweep::run;\nuringbench::Error";
    let seen: Vec<String> = first_segments(text).into_iter().map(|(_, s)| s).collect();
    assert_eq!(seen, ["session", "workload", "sweep"]);
}
