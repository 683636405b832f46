//! Compiles uringbench's XDP programs (`../xdp-prog/*.c`: the receiver's steering program and
//! the live-frames generator) to BPF with clang, so the engine can embed the objects
//! (`include_bytes!` in `src/sys/xdp/program.rs` and `src/sys/xdp/live_frames.rs`) and no
//! separate build step or installed file is needed at run time.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CLANG");
    for name in ["uringbench_xdp", "uringbench_gen"] {
        compile(name);
    }
}

/// Builds `../xdp-prog/NAME.c` into `$OUT_DIR/NAME.o`.
fn compile(name: &str) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let source = manifest.join(format!("../xdp-prog/{name}.c"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join(format!("{name}.o"));
    println!("cargo:rerun-if-changed={}", source.display());
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // The kernel UAPI headers include <asm/types.h>, which Debian keeps under the multiarch
    // directory; `-target bpf` does not search it by itself.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-I", &multiarch, "-c"])
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "building the XDP program {} with {clang} failed (needs the kernel headers: scripts/install-deps.sh --build):\n{}",
            source.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "cannot run '{clang}' to build the XDP program {} ({e}): install clang (scripts/install-deps.sh --build) or set CLANG to its path",
            source.display()
        ),
    }
}
