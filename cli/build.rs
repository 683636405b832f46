//! Renders the man pages (clap_mangen) and the bash, zsh and fish completions (clap_complete)
//! from the same clap definitions the binary parses with (`src/args.rs`, included below), so
//! they can never drift from the real options.
//!
//! Output: `$OUT_DIR/{man,completions}` and a copy in `target/<profile>/assets/`, the fixed
//! path the Debian package (`cargo deb`, see Cargo.toml) takes them from.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "src/args.rs"]
mod args;
#[allow(dead_code)]
#[path = "../engine/src/base/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../engine/src/base/units.rs"]
mod units;

fn main() {
    for input in ["src/args.rs", "../engine/src/base/units.rs", "../engine/src/base/error.rs"] {
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
    clap_mangen::generate_to(cmd.clone(), &man).unwrap_or_else(|e| panic!("writing man pages: {e}"));
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

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    let entries = std::fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
    for entry in entries.flatten() {
        let target = to.join(entry.file_name());
        std::fs::copy(entry.path(), &target).unwrap_or_else(|e| panic!("copying to {}: {e}", target.display()));
    }
}
