//! Fails fast, with one line, when the system lacks what the C parts of the build need: clang
//! (the XDP program is compiled to BPF), make and m4 (libxdp and libbpf are built from source),
//! pkg-config, and the libelf and zlib headers libbpf includes. See src/lib.rs for why this is
//! a crate of its own.

use std::io::Write;
use std::process::{Command, Stdio};

/// Whether `program args` runs and exits 0.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether the C compiler finds `header` (it preprocesses `#include <header>`).
fn has_header(cc: &str, header: &str) -> bool {
    let child = Command::new(cc)
        .args(["-E", "-x", "c", "-", "-o", "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "#include <{header}>");
    }
    child.wait().is_ok_and(|s| s.success())
}

fn main() {
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-changed=build.rs");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut missing = Vec::new();
    if !runs(&clang, &["--version"]) {
        missing.push("clang".to_string());
    }
    for tool in ["make", "m4", "pkg-config"] {
        if !runs(tool, &["--version"]) {
            missing.push(tool.to_string());
        }
    }
    if !runs(&cc, &["--version"]) {
        missing.push(format!("a C compiler ({cc})"));
    } else {
        for (header, package) in [("gelf.h", "libelf-dev"), ("zlib.h", "zlib1g-dev"), ("linux/bpf.h", "linux-libc-dev")]
        {
            if !has_header(&cc, header) {
                missing.push(format!("{header} ({package})"));
            }
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "uringbench cannot be built here: missing {}; install them with scripts/install-deps.sh --build (as root), then build again",
            missing.join(", ")
        );
        std::process::exit(1);
    }
}
