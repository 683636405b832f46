//! The shell scripts and the Vagrantfile: syntax (`bash -n`, `ruby -c`), `shellcheck`, and
//! the cloud recipes' behaviour on a machine without cloud CLIs (they must refuse before
//! creating anything). The recipes themselves only run against real clouds.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scripts() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["scripts", "scripts/lib"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "sh") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

const RECIPES: &[(&str, &str)] = &[("gcp-tier1.sh", "gcloud"), ("aws-ena.sh", "aws"), ("azure-accelnet.sh", "az")];

fn tool(name: &str) -> Command {
    let c = Command::new(name);
    assert!(
        Command::new("sh").args(["-c", &format!("command -v {name}")]).output().unwrap().status.success(),
        "{name} is not installed (.ci/run installs it: apt-get install shellcheck ruby)"
    );
    c
}

#[test]
fn scripts_pass_bash_n_and_shellcheck() {
    let all = scripts();
    assert!(all.len() >= 6, "{all:?}");
    for s in &all {
        let out = Command::new("bash").arg("-n").arg(s).output().unwrap();
        assert!(out.status.success(), "bash -n {}: {}", s.display(), String::from_utf8_lossy(&out.stderr));
    }
    // Everything at warning level; the toolkit's own scripts at every level (style included).
    let out = tool("shellcheck").current_dir(root()).args(["-x", "-S", "warning"]).args(&all).output().unwrap();
    assert!(out.status.success(), "shellcheck: {}", String::from_utf8_lossy(&out.stdout));
    let strict: Vec<PathBuf> = all
        .iter()
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n == "tune.sh" || n == "recipe.sh" || RECIPES.iter().any(|(r, _)| *r == n)
        })
        .cloned()
        .collect();
    assert_eq!(strict.len(), 5);
    let out = tool("shellcheck").current_dir(root()).arg("-x").args(&strict).output().unwrap();
    assert!(out.status.success(), "shellcheck: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn vagrantfile_passes_ruby_c() {
    let out = tool("ruby").arg("-c").arg(root().join("Vagrantfile")).output().unwrap();
    assert!(out.status.success(), "ruby -c Vagrantfile: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(root().join("Vagrantfile")).unwrap();
    assert!(text.contains("192.168.56.11") && text.contains("192.168.56.12") && text.contains("private_network"));
}

/// A PATH with only the basic tools the recipes use before their cloud CLI check.
fn bare_path(dir: &Path) {
    for t in ["dirname", "date", "sed"] {
        let real = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(t)).find(|p| p.exists()).unwrap();
        std::os::unix::fs::symlink(real, dir.join(t)).unwrap();
    }
}

#[test]
fn recipes_refuse_without_their_cloud_cli_and_create_nothing() {
    let dir = std::env::temp_dir().join(format!("uringbench-recipes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    bare_path(&dir);
    for (recipe, cli) in RECIPES {
        let script = root().join("scripts").join(recipe);
        let run = |args: &[&str]| {
            Command::new("/bin/bash")
                .arg(&script)
                .args(args)
                .env_clear()
                .env("PATH", &dir)
                .current_dir(&dir)
                .output()
                .unwrap()
        };
        let out = run(&[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{recipe}: {err}");
        assert!(err.contains(&format!("{cli} ")) && err.contains("not found"), "{recipe} names its CLI: {err}");
        let help = run(&["--help"]);
        assert_eq!(help.status.code(), Some(0), "{recipe} --help");
        assert!(String::from_utf8_lossy(&help.stderr).contains(&format!("scripts/{recipe}")), "usage names the script");
        assert_eq!(run(&["--bogus"]).status.code(), Some(2), "{recipe}: unknown option");
    }
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["date", "dirname", "sed"], "no results folder or key file was created");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// scripts/install-deps.sh with `/etc/os-release` replaced by one that says `text`.
fn install_deps_on(text: &str, args: &[&str]) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("uringbench-osrel-{}-{}", std::process::id(), text.len()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("os-release");
    std::fs::write(&file, text).unwrap();
    let out = Command::new("bash")
        .arg(root().join("scripts/install-deps.sh"))
        .args(args)
        .env("URINGBENCH_OS_RELEASE", &file)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

#[test]
fn install_deps_refuses_an_unknown_distribution_in_one_line_naming_the_packages() {
    let out = install_deps_on("ID=arch\nNAME=\"Arch Linux\"\n", &["--build"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("unknown distribution 'arch'"), "{err}");
    for pkg in ["clang", "llvm", "libelf-dev", "zlib1g-dev", "m4", "libpcap-dev", "iproute2"] {
        assert!(err.split_whitespace().any(|w| w == pkg), "names {pkg}: {err}");
    }
    assert_eq!(install_deps_on("ID=debian\n", &["--bogus"]).status.code(), Some(2), "unknown option");
}

#[test]
fn install_deps_uses_the_distributions_own_names() {
    // Fedora: with no rpm database here every package counts as missing, so --list prints
    // the whole --build list in Fedora's names (and installs nothing).
    let has_rpm = Command::new("sh").args(["-c", "command -v rpm"]).output().unwrap().status.success();
    if !has_rpm {
        let out = install_deps_on("ID=fedora\nID_LIKE=\"rhel centos\"\n", &["--build", "--list"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let listed = String::from_utf8_lossy(&out.stdout);
        for pkg in ["elfutils-libelf-devel", "zlib-devel", "pkgconf-pkg-config", "kernel-headers", "clang"] {
            assert!(listed.lines().any(|l| l == pkg), "fedora name {pkg} listed: {listed}");
        }
        assert!(!listed.lines().any(|l| l == "libelf-dev"), "no Debian names on Fedora: {listed}");
    }
    // Ubuntu is Debian-like: on this (Debian) host the tests run after install-deps.sh
    // --build, so --list finds nothing missing, and without --list it says so.
    let out = install_deps_on("ID=ubuntu\nID_LIKE=debian\n", &["--build", "--list"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "nothing missing");
    let out = install_deps_on("ID=ubuntu\nID_LIKE=debian\n", &["--build"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("packages for run build are installed"), "{said}");
}

#[test]
fn fuzz_sh_refuses_a_bad_duration_in_one_line() {
    let out = Command::new(root().join("scripts/fuzz.sh")).arg("soon").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("SECONDS must be a positive integer"), "{err}");
}
