//! Renders the man pages (clap_mangen) and the bash, zsh and fish completions (clap_complete)
//! from the same clap definitions the binary parses with (`src/args/`, included below), so
//! they can never drift from the real options.
//!
//! Output: `$OUT_DIR/{man,completions}` and a copy in `target/<profile>/assets/`, the fixed
//! path the Debian package (`cargo deb`, see Cargo.toml) takes them from.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "src/args/mod.rs"]
mod args;
#[allow(dead_code)]
#[path = "../engine/src/base/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../engine/src/base/units.rs"]
mod units;

fn main() {
    for input in [
        "src/args/mod.rs",
        "src/args/tuning.rs",
        "src/args/values.rs",
        "src/args/choices.rs",
        "../engine/src/base/units.rs",
        "../engine/src/base/error.rs",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let man = out.join("man");
    let completions = out.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    }
    let mut cmd = args::Cli::command();
    // `uringbench.1` and one page per subcommand (`uringbench-send.1`, ...), as
    // `man uringbench-send` expects.
    let mut built = cmd.clone().disable_help_subcommand(true);
    built.build();
    // `uringbench man [COMMAND]` prints these same pages: an index of them for the binary.
    let mut index = String::from("&[\n");
    for page in std::iter::once(&built).chain(built.get_subcommands()) {
        let name = page.get_display_name().unwrap_or_else(|| page.get_name()).to_string();
        let path = man.join(format!("{name}.1"));
        std::fs::write(&path, man_page(page)).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        index.push_str(&format!("    ({:?}, include_str!({:?})),\n", name, path.display().to_string()));
    }
    index.push_str("]\n");
    let index_path = man.join("pages.rs");
    std::fs::write(&index_path, index).unwrap_or_else(|e| panic!("writing {}: {e}", index_path.display()));
    for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "uringbench", &completions)
            .unwrap_or_else(|e| panic!("writing {shell} completions: {e}"));
    }
    // OUT_DIR is target/<profile>/build/<crate>-<hash>/out: three levels up is target/<profile>.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let assets = profile_dir.join("assets");
        for (from, name) in [(&man, "man"), (&completions, "completions")] {
            copy_dir(from, &assets.join(name));
        }
    }
}

/// One man page: clap_mangen's sections, the command's notes, then EXAMPLES (the example
/// lines of its after-help), EXIT STATUS and ENVIRONMENT.
fn man_page(cmd: &clap::Command) -> Vec<u8> {
    let after = cmd.get_after_help().map(|h| h.to_string()).unwrap_or_default();
    let (examples, notes): (Vec<&str>, Vec<&str>) =
        after.lines().filter(|l| !l.starts_with("Example")).partition(|l| l.trim_start().starts_with("uringbench "));
    let page = clap_mangen::Man::new(cmd.clone().after_help(notes.join("\n").trim().to_string()));
    let mut out = Vec::new();
    let fail = |e: std::io::Error| panic!("rendering the man page of {}: {e}", cmd.get_name());
    page.render_title(&mut out).unwrap_or_else(fail);
    page.render_name_section(&mut out).unwrap_or_else(fail);
    page.render_synopsis_section(&mut out).unwrap_or_else(fail);
    page.render_description_section(&mut out).unwrap_or_else(fail);
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.render_options_section(&mut out).unwrap_or_else(fail);
    }
    if cmd.has_subcommands() {
        page.render_subcommands_section(&mut out).unwrap_or_else(fail);
    }
    if !notes.join("").trim().is_empty() {
        page.render_extra_section(&mut out).unwrap_or_else(fail);
    }
    let mut roff = String::from(".SH EXAMPLES\n");
    for e in &examples {
        roff.push_str(&format!(".nf\n{}\n.fi\n", escape(e.trim())));
    }
    roff.push_str(EXIT_STATUS);
    roff.push_str(ENVIRONMENT);
    out.extend_from_slice(roff.as_bytes());
    if cmd.get_version().is_some() {
        page.render_version_section(&mut out).unwrap_or_else(fail);
    }
    out
}

/// roff text: a leading dot or quote would be a request, a backslash an escape, `-` a hyphen.
fn escape(line: &str) -> String {
    let text = line.replace('\\', "\\e").replace('-', "\\-");
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}

const EXIT_STATUS: &str = ".SH \"EXIT STATUS\"
.TP
0
The test completed (recv: stopped by a signal after its running tests reported; doctor: no check failed).
.TP
1
The test failed or was incomplete (a peer vanished, a flow broke, a check failed, a search found no passing rate).
.TP
2
A usage error: an unknown flag, a bad value, or a flag that does not apply, named in a one\\-line message with what to use instead.
.TP
130
experiment: stopped by Ctrl\\-C after reverting its settings.
";

const ENVIRONMENT: &str = ".SH ENVIRONMENT
.TP
NO_COLOR
doctor: no colours even on a terminal.
.TP
IPERF3_PASSWORD
send \\-\\-iperf3 \\-\\-username: the password sent to the iperf3 server (as iperf3's client reads it); without it, it is asked on the terminal.
.PP
uringbench reads no other variable. The Debian package's uringbench\\-recv.service takes the receiver's options from /etc/default/uringbench.
";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    let entries = std::fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
    for entry in entries.flatten() {
        let target = to.join(entry.file_name());
        std::fs::copy(entry.path(), &target).unwrap_or_else(|e| panic!("copying to {}: {e}", target.display()));
    }
}
