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
