//! The help is complete: every listed flag of every command has a help line of its own, shows
//! its default, and works in the command that lists it (a flag the command refuses whatever
//! else is given is hidden there, not listed).

#[allow(dead_code)]
#[path = "../src/args/mod.rs"]
mod args;
#[allow(dead_code)]
#[path = "../../engine/src/base/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../../engine/src/base/units.rs"]
mod units;

mod common;

use clap::{Arg, Command, CommandFactory};
use std::time::Duration;

/// The command tree as parsing sees it (built: every argument's value count is known).
fn built() -> Command {
    let mut root = args::Cli::command();
    root.build();
    root
}

/// Every command of the tree with its path (`uringbench send`), the root included.
fn commands() -> Vec<(String, Command)> {
    fn walk(path: String, cmd: &Command, out: &mut Vec<(String, Command)>) {
        for sub in cmd.get_subcommands() {
            walk(format!("{path} {}", sub.get_name()), sub, out);
        }
        out.push((path, cmd.clone()));
    }
    let mut out = Vec::new();
    walk("uringbench".into(), &built(), &mut out);
    out
}

/// The flags a user sees: not hidden, not clap's own --help/--version.
fn listed(cmd: &Command) -> Vec<&Arg> {
    cmd.get_arguments().filter(|a| !a.is_hide_set() && !["help", "version"].contains(&a.get_id().as_str())).collect()
}

/// `--sqpoll [IDLE]`: a flag that may be given without its value.
fn optional_value(a: &Arg) -> bool {
    a.get_num_args().is_some_and(|n| n.takes_values() && n.min_values() == 0)
}

fn help_of(a: &Arg) -> String {
    a.get_long_help().or(a.get_help()).map(|h| h.to_string()).unwrap_or_default()
}

fn name(a: &Arg) -> String {
    a.get_long().map_or_else(|| a.get_id().to_string(), |l| format!("--{l}"))
}

#[test]
fn every_listed_flag_has_its_own_help_line() {
    let mut holes = Vec::new();
    for (path, cmd) in commands() {
        let args = listed(&cmd);
        for a in &args {
            let help = help_of(a);
            if help.trim().is_empty() {
                holes.push(format!("{path} {}: blank help", name(a)));
            }
            // The same sentence twice (two doc lines saying one thing).
            let sentences: Vec<&str> = help.split(['.', '\n']).map(str::trim).filter(|s| s.len() > 3).collect();
            for (i, s) in sentences.iter().enumerate() {
                if sentences[i + 1..].contains(s) {
                    holes.push(format!("{path} {}: '{s}' twice", name(a)));
                }
            }
            for b in &args {
                if a.get_id() < b.get_id() && !help.is_empty() && help == help_of(b) {
                    holes.push(format!("{path} {} and {}: the same help", name(a), name(b)));
                }
            }
        }
    }
    assert!(holes.is_empty(), "help holes:\n{}", holes.join("\n"));
}

#[test]
fn every_default_is_shown() {
    let mut hidden = Vec::new();
    for (path, cmd) in commands() {
        for a in listed(&cmd) {
            let help = help_of(a);
            let shown = help.contains("[default");
            if a.is_hide_default_value_set() && !a.get_default_values().is_empty() && !shown {
                hidden.push(format!("{path} {}: default hidden", name(a)));
            }
            // A flag whose value is optional: what it means without one.
            if optional_value(a) && !shown {
                hidden.push(format!("{path} {}: the value used without one is not shown", name(a)));
            }
            // A default told in prose must be in clap's form, where users look for it.
            if help.to_lowercase().contains("(default") {
                hidden.push(format!("{path} {}: '(default' instead of '[default: ...]'", name(a)));
            }
        }
    }
    assert!(hidden.is_empty(), "defaults not shown:\n{}", hidden.join("\n"));
}

/// A value a flag takes, for trying it; `None` leaves the flag out (it needs a host or
/// hardware this test does not have, which the note says).
fn sample(cmd: &str, a: &Arg, psk: &str) -> Option<Vec<String>> {
    let long = a.get_long()?;
    let v = |s: &str| Some(vec![format!("--{long}"), s.to_string()]);
    // Stamped responses need room for the stamp; --clocks-synced qualifies --trip-times.
    if long == "trip-times" || long == "clocks-synced" {
        let mut with = vec!["--trip-times".to_string(), "--resp".into(), "8".into()];
        with.extend((long == "clocks-synced").then(|| "--clocks-synced".to_string()));
        return Some(with);
    }
    // --gen picks the XDP engine's generator: given with that engine, it must be taken.
    if long == "gen" {
        return Some(["--engine", "xdp", "--iface", "lo", "--gen", "live"].map(String::from).to_vec());
    }
    if !a.get_num_args().is_some_and(|n| n.takes_values()) || optional_value(a) {
        return Some(vec![format!("--{long}")]);
    }
    if let Some(p) = a.get_possible_values().last() {
        return v(p.get_name());
    }
    match long {
        "psk-file" => v(psk),
        // An instant a few seconds ahead: --start-at refuses one in the past, and sleeps until 5 s
        // before the instant.
        "start-at" => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            v(&(now + 7).to_string())
        }
        // --iface belongs to --engine xdp; given with it, it must be taken.
        "iface" => Some(vec!["--engine".into(), "xdp".into(), "--iface".into(), "lo".into()]),
        "bind" => v("127.0.0.1"),
        "bind-dev" => v("lo"),
        "congestion" => v("reno"),
        "dscp" => v("EF"),
        "tos" => v("0x28"),
        "mss" => v("1200"),
        "title" => v("x"),
        "logfile" => v("/dev/null"),
        "cpus" => v("0"),
        "units" => v("m"),
        "cport" => v("5999"),
        "warmup" | "cooldown" | "interval" | "timeout" | "trial" => v("1s"),
        "len" | "req" | "resp" | "window" | "bytes" => v(if cmd == "sweep" { "64K" } else { "1000" }),
        "rate" | "fq-rate" | "max-rate" | "pps" => v("1M"),
        "loss" | "resolution" => v("1%"),
        "csv" | "svg" | "json-file" => v("/dev/null"),
        _ => v("1"),
    }
}

/// The smallest command line of each command that runs against a target; a flag is then
/// added to it. 127.0.0.1 port 9: nothing listens, so a run that gets past the checks of its
/// flags ends at the connect (exit 1).
const BASES: &[(&str, &[&str])] = &[
    ("send", &["-c", "127.0.0.1", "-p", "9", "-t", "1"]),
    ("rr", &["-c", "127.0.0.1", "-p", "9", "-t", "1"]),
    ("crr", &["-c", "127.0.0.1", "-p", "9", "-t", "1"]),
    ("sweep", &["-c", "127.0.0.1", "-p", "9", "-t", "1", "-P", "1,2"]),
    ("search", &["-c", "127.0.0.1", "-p", "9", "--trial", "1s"]),
];

#[test]
fn no_command_lists_a_flag_it_refuses() {
    let psk_path = std::env::temp_dir().join(format!("uringbench-help-psk-{}", std::process::id()));
    std::fs::write(&psk_path, "a shared secret of more than sixteen bytes\n").expect("write psk");
    let psk = psk_path.to_string_lossy().into_owned();
    let root = built();
    let mut refused = Vec::new();
    let mut tried = 0;
    for (cmd_name, base) in BASES {
        let cmd = root.find_subcommand(cmd_name).expect("subcommand");
        for a in listed(cmd) {
            let Some(extra) = sample(cmd_name, a, &psk) else { continue };
            let in_base = base.iter().any(|b| {
                a.get_long().is_some_and(|l| *b == format!("--{l}"))
                    || a.get_short().is_some_and(|s| *b == format!("-{s}"))
            });
            if in_base {
                continue;
            }
            let mut c = std::process::Command::new(common::bin());
            c.arg(cmd_name).args(*base).args(&extra);
            let out = common::run_bounded(c, Duration::from_secs(20)).0;
            tried += 1;
            let stderr = String::from_utf8_lossy(&out.stderr);
            let long = format!("--{}", a.get_long().unwrap_or_default());
            if out.status.code() == Some(2) && stderr.contains(&long) {
                refused.push(format!("uringbench {cmd_name} {}: {}", extra.join(" "), stderr.trim()));
            }
        }
    }
    let _ = std::fs::remove_file(&psk_path);
    assert!(tried > 100, "tried {tried} flags");
    assert!(refused.is_empty(), "listed in help but refused:\n{}", refused.join("\n"));
}

#[test]
fn json_to_a_file_has_one_spelling() {
    for (path, cmd) in commands() {
        for a in cmd.get_arguments() {
            let takes_file = a.get_value_names().is_some_and(|v| v.iter().any(|n| n == "FILE"));
            if a.get_long() == Some("json") {
                assert!(!takes_file, "{path}: --json is the flag for JSON on stdout; a file is --json-file");
            }
            if a.get_long() == Some("json-file") {
                assert!(takes_file, "{path}: --json-file takes a FILE");
            }
        }
    }
}

#[test]
fn man_pages_have_exit_status_examples_and_environment() {
    let assets = std::path::Path::new(common::bin()).parent().expect("target dir").join("assets/man");
    let mut pages = 0;
    for entry in std::fs::read_dir(&assets).unwrap_or_else(|e| panic!("{}: {e}", assets.display())) {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "1") {
            continue; // build.rs's index of the pages, for `uringbench man`
        }
        let page = std::fs::read_to_string(&path).expect("man page");
        for section in [".SH \"EXIT STATUS\"", ".SH EXAMPLES", ".SH ENVIRONMENT"] {
            assert!(page.contains(section), "{}: no {section}", path.display());
        }
        pages += 1;
    }
    assert!(pages >= 13, "a page for uringbench and each command: {pages}");
}

/// `uringbench completions SHELL` and `uringbench man [COMMAND]` print what the package
/// installs, byte for byte (build.rs's files, target/<profile>/assets).
#[test]
fn completions_and_man_pages_are_the_packaged_ones() {
    let assets = std::path::Path::new(common::bin()).parent().expect("target dir").join("assets");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::bin()).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    for (shell, file) in [("bash", "uringbench.bash"), ("zsh", "_uringbench"), ("fish", "uringbench.fish")] {
        let packaged = std::fs::read(assets.join("completions").join(file)).expect("packaged completions");
        assert_eq!(run(&["completions", shell]), packaged, "{shell}");
    }
    for (args, file) in [(&["man"][..], "uringbench.1"), (&["man", "send"][..], "uringbench-send.1")] {
        let packaged = std::fs::read(assets.join("man").join(file)).expect("packaged man page");
        assert_eq!(run(args), packaged, "{args:?}");
    }
    let out = std::process::Command::new(common::bin()).args(["man", "nosuch"]).output().expect("run");
    common::one_line_error(&out, 2, "no man page for 'nosuch': one of recv, send");
}
