//! Host settings that a tuning experiment changes, and their exact undo: sysctls and other
//! kernel files (IRQ affinity, RPS/XPS masks, the governor), `ethtool` features, channels,
//! rings and coalescing, the MTU, the root qdisc, and apply/revert command pairs.
//!
//! Every change goes through a [`Journal`]: the previous value is appended to a state file
//! (and flushed) *before* the change is made, so an interrupted run (an error, Ctrl-C, a kill)
//! leaves what is needed to undo it, and [`Journal::revert`] restores the values in reverse
//! order. The state file is the format `scripts/tune.sh` has always written, one change per
//! line, `KIND<TAB>KEY<TAB>PREVIOUS`:
//!
//! | kind | key | previous |
//! |---|---|---|
//! | `file` | path | content (tabs as spaces) |
//! | `ethtool-k` / `-l` / `-g` / `-c` | interface | `NAME VALUE` pairs for `ethtool -K/-L/-G/-C` |
//! | `service` | unit | `active` |
//! | `mtu` | interface | MTU |
//! | `qdisc` | interface | `default`, or `handle H: KIND PARAMS` as `tc qdisc show` printed it |
//! | `command` | the apply command | the revert command |
//!
//! What a variant's settings are, as a plan or a `recv --variants` file writes them, and the
//! changes they make, is `variants.rs`.

use crate::base::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};

mod variants;
pub(crate) use variants::valid_variant_name;
pub use variants::{CommandPair, IfaceSettings, ReceiverVariants, SettingsSpec};

/// Kernel files a setting may write: tunables, not arbitrary files.
const WRITABLE: &[&str] = &["/proc/sys/", "/sys/class/net/", "/proc/irq/", "/sys/devices/system/cpu/"];

/// One change to make.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// Write a kernel file (a sysctl is `/proc/sys/` plus its dotted name as a path).
    File {
        path: String,
        value: String,
    },
    /// `ethtool -K IF NAME on|off`.
    EthtoolFeature {
        iface: String,
        feature: String,
        value: String,
    },
    /// `ethtool -L|-G|-C IF NAME N` (flag `l`, `g` or `c`).
    EthtoolParam {
        iface: String,
        flag: char,
        name: String,
        value: String,
    },
    Mtu {
        iface: String,
        mtu: u32,
    },
    /// `tc qdisc replace dev IF root SPEC`.
    Qdisc {
        iface: String,
        spec: String,
    },
    Command {
        apply: String,
        revert: String,
    },
}

impl Change {
    /// A sysctl by its dotted name.
    pub fn sysctl(name: &str, value: &str) -> Result<Self> {
        if name.is_empty()
            || name.contains("..")
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(Error::usage(format!("bad sysctl name '{name}'")));
        }
        Ok(Change::File { path: format!("/proc/sys/{}", name.replace('.', "/")), value: value.to_owned() })
    }

    /// A change as `uringbench settings apply` takes it: `KIND:TARGET=VALUE` (see its help).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || {
            Error::usage(format!(
                "bad change '{text}': KIND:TARGET=VALUE with KIND sysctl, file, ethtool-k, ethtool-l, ethtool-g, ethtool-c, mtu or qdisc"
            ))
        };
        let (kind, rest) = text.split_once(':').ok_or_else(bad)?;
        let (target, value) = rest.split_once('=').ok_or_else(bad)?;
        let change = match kind {
            "sysctl" => Change::sysctl(target, value)?,
            "file" => Change::File { path: target.into(), value: value.into() },
            "mtu" => Change::Mtu {
                iface: target.into(),
                mtu: value.parse().map_err(|_| Error::usage(format!("MTU '{value}' is not a number")))?,
            },
            "qdisc" => Change::Qdisc { iface: target.into(), spec: value.into() },
            "ethtool-k" | "ethtool-l" | "ethtool-g" | "ethtool-c" => {
                let (iface, name) = target.split_once(':').ok_or_else(bad)?;
                let flag = kind.as_bytes()[8] as char;
                if flag == 'k' {
                    Change::EthtoolFeature { iface: iface.into(), feature: name.into(), value: value.into() }
                } else {
                    Change::EthtoolParam { iface: iface.into(), flag, name: name.into(), value: value.into() }
                }
            }
            _ => return Err(bad()),
        };
        change.validate()?;
        Ok(change)
    }

    /// How the change reads in a report.
    pub fn describe(&self) -> String {
        match self {
            Change::File { path, value } => match path.strip_prefix("/proc/sys/") {
                Some(name) => format!("sysctl {} = {value}", name.replace('/', ".")),
                None => format!("{path} = {value}"),
            },
            Change::EthtoolFeature { iface, feature, value } => format!("ethtool -K {iface} {feature} {value}"),
            Change::EthtoolParam { iface, flag, name, value } => {
                format!("ethtool -{} {iface} {name} {value}", flag.to_ascii_uppercase())
            }
            Change::Mtu { iface, mtu } => format!("ip link set dev {iface} mtu {mtu}"),
            Change::Qdisc { iface, spec } => format!("tc qdisc replace dev {iface} root {spec}"),
            Change::Command { apply, revert } => format!("command '{apply}' (revert: '{revert}')"),
        }
    }

    fn validate(&self) -> Result<()> {
        let no_ctl = |what: &str, s: &str| {
            if s.is_empty() || s.contains(['\t', '\n', '\r']) {
                Err(Error::usage(format!("{what} '{s}' is empty or holds a tab or newline")))
            } else {
                Ok(())
            }
        };
        let iface_ok = |i: &str| {
            if i.is_empty() || i.len() > 15 || !i.chars().all(|c| c.is_ascii_alphanumeric() || "_.:@-".contains(c)) {
                Err(Error::usage(format!("bad interface name '{i}'")))
            } else {
                Ok(())
            }
        };
        match self {
            Change::File { path, value } => {
                if !WRITABLE.iter().any(|p| path.starts_with(p)) || path.contains("..") {
                    return Err(Error::usage(format!("{path}: settings may write only under {}", WRITABLE.join(", "))));
                }
                no_ctl("value", value)
            }
            Change::EthtoolFeature { iface, feature, value } => {
                iface_ok(iface)?;
                no_ctl("feature", feature)?;
                if value != "on" && value != "off" {
                    return Err(Error::usage(format!("ethtool feature {feature}: '{value}' is not on or off")));
                }
                Ok(())
            }
            Change::EthtoolParam { iface, name, value, .. } => {
                iface_ok(iface)?;
                no_ctl("ethtool parameter", name)?;
                no_ctl("value", value)
            }
            Change::Mtu { iface, mtu } => {
                iface_ok(iface)?;
                if !(68..=65535).contains(mtu) {
                    return Err(Error::usage(format!("MTU {mtu} outside 68..65535")));
                }
                Ok(())
            }
            Change::Qdisc { iface, spec } => {
                iface_ok(iface)?;
                no_ctl("qdisc", spec)
            }
            Change::Command { apply, revert } => {
                no_ctl("apply command", apply)?;
                no_ctl("revert command", revert)
            }
        }
    }
}

/// Runs a program, returning its stdout; an error names the command and its stderr.
fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::unsupported(format!("cannot run {program}: {e} (scripts/install-deps.sh installs it)")))?;
    if !out.status.success() {
        return Err(Error::unsupported(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn shell(command: &str) -> Result<()> {
    let out = Command::new("sh").args(["-c", command]).output().map_err(|e| Error::io("running sh", e))?;
    if !out.status.success() {
        return Err(Error::unsupported(format!(
            "command '{command}' failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// `ethtool -k` long names of the short ones `ethtool -K` takes.
fn feature_long_name(short: &str) -> &str {
    match short {
        "tso" => "tcp-segmentation-offload",
        "gso" => "generic-segmentation-offload",
        "gro" => "generic-receive-offload",
        "lro" => "large-receive-offload",
        "sg" => "scatter-gather",
        "rx" => "rx-checksumming",
        "tx" => "tx-checksumming",
        "rxhash" => "receive-hashing",
        "ntuple" => "ntuple-filters",
        "rxvlan" => "rx-vlan-offload",
        "txvlan" => "tx-vlan-offload",
        other => other,
    }
}

/// A feature's current value from `ethtool -k` output; an error when it is fixed or absent.
fn parse_feature(output: &str, feature: &str) -> Result<String> {
    let long = feature_long_name(feature);
    for line in output.lines() {
        let Some((name, rest)) = line.trim().split_once(':') else { continue };
        if name == long || name == feature {
            let mut words = rest.split_whitespace();
            let value = words.next().unwrap_or("");
            if rest.contains("[fixed]") {
                return Err(Error::unsupported(format!(
                    "ethtool feature {feature} is fixed at {value} on this device"
                )));
            }
            return Ok(value.to_owned());
        }
    }
    Err(Error::unsupported(format!("the device has no ethtool feature '{feature}'")))
}

/// The current value of `name` from `ethtool -l/-g/-c` output ("Current hardware settings"
/// section for -l and -g, the whole output for -c).
fn parse_param(output: &str, flag: char, name: &str) -> Result<String> {
    let label = match (flag, name) {
        ('l' | 'g', "rx") => "RX".to_owned(),
        ('l' | 'g', "tx") => "TX".to_owned(),
        ('l', "other") => "Other".to_owned(),
        ('l', "combined") => "Combined".to_owned(),
        ('g', "rx-mini") => "RX Mini".to_owned(),
        ('g', "rx-jumbo") => "RX Jumbo".to_owned(),
        _ => name.to_owned(),
    };
    let mut in_current = flag == 'c';
    for line in output.lines() {
        if line.starts_with("Current hardware settings") {
            in_current = true;
            continue;
        }
        if line.starts_with("Pre-set maximums") {
            in_current = false;
            continue;
        }
        if !in_current {
            continue;
        }
        if let Some((k, v)) = line.trim().split_once(':') {
            if k.trim() == label {
                let v = v.trim();
                if v.is_empty() || v == "n/a" {
                    break;
                }
                return Ok(v.to_owned());
            }
        }
    }
    Err(Error::unsupported(format!("ethtool -{flag}: the device reports no '{name}'")))
}

/// The root qdisc as the state file keeps it: `default` for the kernel's own (handle 0:),
/// else `handle H: KIND PARAMS`.
fn parse_root_qdisc(show: &str) -> Result<String> {
    let line = show
        .lines()
        .find(|l| l.contains(" root"))
        .ok_or_else(|| Error::unsupported(format!("no root qdisc in `tc qdisc show`: {show}")))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    // qdisc KIND HANDLE root [refcnt N] PARAMS...
    if words.len() < 4 || words[0] != "qdisc" {
        return Err(Error::unsupported(format!("unexpected `tc qdisc show` line: {line}")));
    }
    if words[2] == "0:" {
        return Ok("default".into());
    }
    let mut params = &words[4..];
    if params.first() == Some(&"refcnt") {
        params = params.get(2..).unwrap_or(&[]);
    }
    Ok(format!("handle {} {} {}", words[2], words[1], params.join(" ")).trim_end().to_owned())
}

/// One recorded change: what to restore.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub kind: String,
    pub key: String,
    pub previous: String,
}

impl Entry {
    fn line(&self) -> String {
        format!("{}\t{}\t{}\n", self.kind, self.key, self.previous)
    }

    fn parse(line: &str) -> Result<Self> {
        let mut f = line.splitn(3, '\t');
        match (f.next(), f.next(), f.next()) {
            (Some(kind), Some(key), Some(previous)) => {
                Ok(Entry { kind: kind.into(), key: key.into(), previous: previous.into() })
            }
            _ => Err(Error::usage(format!("malformed state line: {line}"))),
        }
    }

    /// Puts the previous value back.
    pub fn restore(&self) -> Result<String> {
        let (k, p) = (self.key.as_str(), self.previous.as_str());
        match self.kind.as_str() {
            "file" => {
                write_file(k, p)?;
                Ok(format!("{k} <- {p}"))
            }
            "ethtool-k" | "ethtool-l" | "ethtool-g" | "ethtool-c" => {
                let flag = format!("-{}", self.kind.as_bytes()[8].to_ascii_uppercase() as char);
                let mut args = vec![flag.as_str(), k];
                args.extend(p.split_whitespace());
                run("ethtool", &args)?;
                Ok(format!("ethtool {}", args.join(" ")))
            }
            "service" => {
                run("systemctl", &["start", k])?;
                Ok(format!("systemctl start {k}"))
            }
            "mtu" => {
                run("ip", &["link", "set", "dev", k, "mtu", p])?;
                Ok(format!("ip link set dev {k} mtu {p}"))
            }
            "qdisc" if p == "default" => {
                // The kernel's own qdisc comes back when the configured one is deleted; a root
                // already back at the default has nothing to delete.
                let now = parse_root_qdisc(&run("tc", &["qdisc", "show", "dev", k, "root"])?)?;
                if now != "default" {
                    run("tc", &["qdisc", "del", "dev", k, "root"])?;
                }
                Ok(format!("tc qdisc del dev {k} root (back to the default)"))
            }
            "qdisc" => {
                let mut args = vec!["qdisc", "replace", "dev", k, "root"];
                args.extend(p.split_whitespace());
                run("tc", &args)?;
                Ok(format!("tc {}", args.join(" ")))
            }
            "command" => {
                shell(p)?;
                Ok(format!("ran '{p}'"))
            }
            "ntuple" => {
                let location: u32 =
                    p.parse().map_err(|_| Error::usage(format!("n-tuple rule location '{p}' is not a number")))?;
                crate::sys::ntuple::delete_rule(k, location)?;
                Ok(format!("ethtool -N {k} delete {location}"))
            }
            other => Err(Error::usage(format!("unknown state line kind '{other}'"))),
        }
    }
}

fn read_file(path: &str) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::usage(format!("reading {path}: {e}")))?;
    Ok(text.trim_end_matches('\n').replace('\t', " "))
}

fn write_file(path: &str, value: &str) -> Result<()> {
    std::fs::write(path, format!("{value}\n")).map_err(|e| Error::io(format!("writing {value} to {path}"), e))
}

fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// Changes made so far, and the state file that holds their previous values.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    header: String,
    entries: Vec<Entry>,
}

impl Journal {
    /// A new state file; refused when one exists (its changes were never reverted, and
    /// recording on top would save changed values as the previous ones).
    pub fn create(path: &Path, header: &str) -> Result<Self> {
        if path.exists() {
            return Err(Error::usage(format!(
                "{} exists: an earlier run was not reverted; run `uringbench settings revert --state {}` first",
                path.display(),
                path.display()
            )));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        std::fs::write(path, format!("# {header}\n"))
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(Self { path: path.to_owned(), header: header.to_owned(), entries: Vec::new() })
    }

    /// The state file to add to: an existing one (a run of `settings apply` per change, as
    /// `scripts/tune.sh` makes them), else a new one.
    pub fn append_to(path: &Path, header: &str) -> Result<Self> {
        if path.exists() {
            let mut j = Self::open(path)?;
            j.header = header.to_owned();
            Ok(j)
        } else {
            Self::create(path, header)
        }
    }

    /// An existing state file, to revert.
    pub fn open(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::usage(format!("nothing to revert: {}: {e}", path.display())))?;
        let entries = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(Entry::parse)
            .collect::<Result<_>>()?;
        Ok(Self { path: path.to_owned(), header: "uringbench settings".into(), entries })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn append(&mut self, entry: Entry) -> Result<()> {
        // A revert removed the file; the next change starts it again.
        let fresh = !self.path.exists();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| Error::io(format!("opening {}", self.path.display()), e))?;
        let header = if fresh { format!("# {}\n", self.header) } else { String::new() };
        f.write_all(format!("{header}{}", entry.line()).as_bytes())
            .and_then(|_| f.sync_data())
            .map_err(|e| Error::io(format!("recording in {}", self.path.display()), e))?;
        self.entries.push(entry);
        Ok(())
    }

    /// Records an n-tuple flow rule just installed in slot `location` of `iface`: reverting
    /// deletes it (`uringbench settings revert`, or the forced-exit path).
    pub fn record_ntuple_rule(&mut self, iface: &str, location: u32) -> Result<()> {
        self.append(Entry { kind: "ntuple".into(), key: iface.into(), previous: location.to_string() })
    }

    /// Drops the entry just appended when its change did not happen.
    fn unrecord_last(&mut self) -> Result<()> {
        self.entries.pop();
        self.rewrite()
    }

    fn rewrite(&self) -> Result<()> {
        let mut text = std::fs::read_to_string(&self.path)
            .map(|t| t.lines().filter(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect::<String>())
            .unwrap_or_default();
        for e in &self.entries {
            text.push_str(&e.line());
        }
        std::fs::write(&self.path, text).map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    /// Records the previous value, then makes the change. Returns what was done, or `None` when
    /// the setting already had the value (nothing recorded, nothing changed).
    pub fn apply(&mut self, change: &Change) -> Result<Option<String>> {
        change.validate()?;
        let (entry, previous_shown) = match change {
            Change::File { path, value } => {
                let old = read_file(path)?;
                if same_value(&old, value) {
                    return Ok(None);
                }
                (Entry { kind: "file".into(), key: path.clone(), previous: old.clone() }, old)
            }
            Change::EthtoolFeature { iface, feature, value } => {
                let old = parse_feature(&run("ethtool", &["-k", iface])?, feature)?;
                if &old == value {
                    return Ok(None);
                }
                (Entry { kind: "ethtool-k".into(), key: iface.clone(), previous: format!("{feature} {old}") }, old)
            }
            Change::EthtoolParam { iface, flag, name, value } => {
                let old = parse_param(&run("ethtool", &[&format!("-{flag}"), iface])?, *flag, name)?;
                if &old == value {
                    return Ok(None);
                }
                (Entry { kind: format!("ethtool-{flag}"), key: iface.clone(), previous: format!("{name} {old}") }, old)
            }
            Change::Mtu { iface, mtu } => {
                let old = read_file(&format!("/sys/class/net/{iface}/mtu"))
                    .map_err(|_| Error::usage(format!("no interface {iface} here (see `ip link`)")))?;
                if old == mtu.to_string() {
                    return Ok(None);
                }
                (Entry { kind: "mtu".into(), key: iface.clone(), previous: old.clone() }, old)
            }
            Change::Qdisc { iface, .. } => {
                let old = parse_root_qdisc(&run("tc", &["qdisc", "show", "dev", iface, "root"])?)?;
                (Entry { kind: "qdisc".into(), key: iface.clone(), previous: old.clone() }, old)
            }
            Change::Command { apply, revert } => {
                (Entry { kind: "command".into(), key: apply.clone(), previous: revert.clone() }, String::new())
            }
        };
        self.append(entry)?;
        let made = match change {
            Change::File { path, value } => write_file(path, value),
            Change::EthtoolFeature { iface, feature, value } => {
                run("ethtool", &["-K", iface, feature, value]).map(drop)
            }
            Change::EthtoolParam { iface, flag, name, value } => {
                run("ethtool", &[&format!("-{}", flag.to_ascii_uppercase()), iface, name, value]).map(drop)
            }
            Change::Mtu { iface, mtu } => run("ip", &["link", "set", "dev", iface, "mtu", &mtu.to_string()]).map(drop),
            Change::Qdisc { iface, spec } => {
                let mut args = vec!["qdisc", "replace", "dev", iface.as_str(), "root"];
                args.extend(spec.split_whitespace());
                run("tc", &args).map(drop)
            }
            Change::Command { apply, .. } => shell(apply),
        };
        if let Err(e) = made {
            // A command may have done part of its work before failing: keep its revert.
            if !matches!(change, Change::Command { .. }) {
                self.unrecord_last()?;
            }
            return Err(e);
        }
        let was = if previous_shown.is_empty() { String::new() } else { format!(" (was {previous_shown})") };
        Ok(Some(format!("{}{was}", change.describe())))
    }

    /// Restores every recorded value, newest first, and removes the state file. A value that
    /// cannot be restored stays in the file (with the others that failed) and makes this an
    /// error after everything else has been tried.
    pub fn revert(&mut self) -> Result<Vec<String>> {
        let mut done = Vec::new();
        let mut failed = Vec::new();
        while let Some(entry) = self.entries.pop() {
            match entry.restore() {
                Ok(what) => done.push(what),
                Err(e) => failed.push((entry, e)),
            }
            // Keep the file current, so a second interruption leaves only what is left to do.
            let mut left = self.entries.clone();
            left.extend(failed.iter().map(|(e, _)| e.clone()));
            let saved = std::mem::replace(&mut self.entries, left);
            let _ = self.rewrite();
            self.entries = saved;
        }
        if failed.is_empty() {
            let _ = std::fs::remove_file(&self.path);
            return Ok(done);
        }
        let reasons: Vec<String> = failed.iter().map(|(_, e)| e.message.clone()).collect();
        self.entries = failed.into_iter().rev().map(|(e, _)| e).collect();
        let _ = self.rewrite();
        Err(Error::unsupported(format!(
            "could not restore {} setting(s), kept in {}: {}",
            reasons.len(),
            self.path.display(),
            reasons.join("; ")
        )))
    }
}

/// A journal shared with the forced-exit path (see [`revert_registered`]).
pub(crate) type SharedJournal = Arc<Mutex<Journal>>;

static LIVE: Mutex<Vec<Weak<Mutex<Journal>>>> = Mutex::new(Vec::new());

/// Registers a journal for [`revert_registered`]: reverted if the process is forced to exit
/// while it is alive.
pub fn register(journal: Journal) -> SharedJournal {
    let shared = Arc::new(Mutex::new(journal));
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(Arc::downgrade(&shared));
    shared
}

/// Reverts every registered journal that is still alive and not empty: the last step before a
/// forced exit (a second signal while a stopped run is still ending), so that no setting
/// outlives the process. A run that ends normally reverts its own journal; this is only for
/// the exit that does not wait for it. Returns how many settings were reverted, and the
/// journals that could not be (their state files stay for `uringbench settings revert`).
pub fn revert_registered() -> (usize, Vec<Error>) {
    let live: Vec<SharedJournal> =
        LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
    let (mut reverted, mut failed) = (0, Vec::new());
    for journal in live {
        let mut journal = journal.lock().unwrap_or_else(|p| p.into_inner());
        if journal.entries().is_empty() {
            continue;
        }
        match journal.revert() {
            Ok(done) => reverted += done.len(),
            Err(e) => failed.push(e),
        }
    }
    (reverted, failed)
}

/// The default state file for this network namespace and purpose.
pub fn default_state(purpose: &str) -> PathBuf {
    let ns = std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| l.to_str().map(|s| s.trim_start_matches("net:[").trim_end_matches(']').to_owned()))
        .unwrap_or_else(|| "unknown".into());
    PathBuf::from(format!("/var/lib/uringbench/{purpose}-{ns}.state"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ntuple_rule_entry_reverts_by_deleting_its_slot() {
        let entry = Entry::parse("ntuple\tlo\t7").unwrap();
        assert_eq!(entry.line(), "ntuple\tlo\t7\n");
        // Loopback has no rule table: the delete is tried, and fails naming the rule.
        let err = entry.restore().unwrap_err();
        assert!(err.message.contains("removing n-tuple rule 7 from lo"), "{err}");
        let bad = Entry { kind: "ntuple".into(), key: "lo".into(), previous: "x".into() };
        assert!(bad.restore().unwrap_err().message.contains("not a number"));
    }

    #[test]
    fn parses_ethtool_and_tc_output() {
        let k = "Features for veth0:\nrx-checksumming: on\ngeneric-receive-offload: off\nlarge-receive-offload: off [fixed]\n";
        assert_eq!(parse_feature(k, "gro").unwrap(), "off");
        assert_eq!(parse_feature(k, "rx").unwrap(), "on");
        assert!(parse_feature(k, "lro").unwrap_err().message.contains("fixed"));
        assert!(parse_feature(k, "nope").is_err());
        let l = "Channel parameters for eth0:\nPre-set maximums:\nRX:\t\tn/a\nCombined:\t8\nCurrent hardware settings:\nRX:\t\tn/a\nCombined:\t2\n";
        assert_eq!(parse_param(l, 'l', "combined").unwrap(), "2");
        assert!(parse_param(l, 'l', "rx").is_err());
        let c = "Coalesce parameters for eth0:\nAdaptive RX: off  TX: off\nrx-usecs: 50\ntx-usecs: 0\n";
        assert_eq!(parse_param(c, 'c', "rx-usecs").unwrap(), "50");
        assert_eq!(parse_root_qdisc("qdisc noqueue 0: root refcnt 2 \n").unwrap(), "default");
        assert_eq!(
            parse_root_qdisc("qdisc tbf 8001: root refcnt 2 rate 2Gbit burst 256Kb lat 10ms \n").unwrap(),
            "handle 8001: tbf rate 2Gbit burst 256Kb lat 10ms"
        );
        assert_eq!(parse_root_qdisc("qdisc fq 8002: root\n").unwrap(), "handle 8002: fq");
    }

    #[test]
    fn a_spec_turns_into_checked_changes() {
        let spec: SettingsSpec = toml::from_str(
            r#"
            sysctl = { "net.ipv4.tcp_congestion_control" = "cubic" }
            irq_affinity = { "45" = "1" }
            [iface.eth0]
            mtu = 9000
            features = { gro = "off" }
            channels = { combined = 4 }
            qdisc = "fq"
            [[commands]]
            apply = "true"
            revert = "true"
            "#,
        )
        .unwrap();
        let changes = spec.changes().unwrap();
        let described: Vec<String> = changes.iter().map(Change::describe).collect();
        assert_eq!(
            described,
            [
                "sysctl net.ipv4.tcp_congestion_control = cubic",
                "/proc/irq/45/smp_affinity_list = 1",
                "ip link set dev eth0 mtu 9000",
                "ethtool -K eth0 gro off",
                "ethtool -L eth0 combined 4",
                "tc qdisc replace dev eth0 root fq",
                "command 'true' (revert: 'true')",
            ]
        );
        let bad = |t: &str| {
            toml::from_str::<SettingsSpec>(t)
                .map_err(|e| e.to_string())
                .and_then(|s| s.changes().map_err(|e| e.message))
        };
        assert!(bad(r#"files = { "/etc/passwd" = "x" }"#).unwrap_err().contains("may write only under"));
        assert!(bad(r#"sysctl = { "../x" = "1" }"#).unwrap_err().contains("bad sysctl"));
        assert!(bad("[iface.eth0]\nfeatures = { gro = \"maybe\" }").unwrap_err().contains("not on or off"));
        assert!(bad("[iface.eth0]\nmtu = 10").unwrap_err().contains("MTU"));
        assert!(bad("colour = 1").unwrap_err().contains("unknown field"));
    }

    #[test]
    fn command_line_changes() {
        assert_eq!(
            Change::parse("sysctl:net.core.rmem_max=1024").unwrap().describe(),
            "sysctl net.core.rmem_max = 1024"
        );
        assert_eq!(Change::parse("ethtool-k:eth0:gso=off").unwrap().describe(), "ethtool -K eth0 gso off");
        assert_eq!(Change::parse("ethtool-l:eth0:combined=4").unwrap().describe(), "ethtool -L eth0 combined 4");
        assert_eq!(
            Change::parse("qdisc:eth0=tbf rate 1gbit burst 32k latency 5ms").unwrap().describe(),
            "tc qdisc replace dev eth0 root tbf rate 1gbit burst 32k latency 5ms"
        );
        assert_eq!(Change::parse("mtu:eth0=9000").unwrap(), Change::Mtu { iface: "eth0".into(), mtu: 9000 });
        for bad in ["sysctl", "nope:x=1", "file:/etc/shadow=x", "ethtool-k:eth0=on", "mtu:eth0=big"] {
            assert_eq!(Change::parse(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn receiver_variants_name_what_they_allow() {
        let v =
            ReceiverVariants::parse("v.toml", "[gro-on.iface.ubb0]\nfeatures = { gro = \"on\" }\n[plain]\n").unwrap();
        assert_eq!(v.names(), ["gro-on", "plain"]);
        assert_eq!(v.get("gro-on").unwrap()[0].describe(), "ethtool -K ubb0 gro on");
        assert!(v.get("plain").unwrap().is_empty());
        let refused = v.get("rm-rf").unwrap_err();
        assert!(refused.contains("not one this receiver allows") && refused.contains("gro-on, plain"), "{refused}");
        assert!(ReceiverVariants::parse("v", "").unwrap_err().message.contains("no variant"));
        assert!(ReceiverVariants::parse("v", "[\"a b\"]").unwrap_err().message.contains("bad variant name"));
    }

    #[test]
    fn journal_records_before_and_restores_after() {
        // A file under /proc/sys would need root and a namespace; the journal logic is the same
        // for any path, so test it on the state file's own directory with File entries.
        let dir = std::env::temp_dir().join(format!("ub-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state = dir.join("s.state");
        let _ = std::fs::remove_file(&state);
        let target = dir.join("value");
        std::fs::write(&target, "1\t2\t3\n").unwrap();
        let mut j = Journal::create(&state, "test").unwrap();
        assert!(Journal::create(&state, "again").unwrap_err().message.contains("was not reverted"));
        j.append(Entry {
            kind: "file".into(),
            key: target.display().to_string(),
            previous: read_file(target.to_str().unwrap()).unwrap(),
        })
        .unwrap();
        write_file(target.to_str().unwrap(), "9").unwrap();
        let reopened = Journal::open(&state).unwrap();
        assert_eq!(reopened.entries()[0].previous, "1 2 3", "recorded on disk, tabs as spaces");
        let done = j.revert().unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "1 2 3\n");
        assert!(!state.exists(), "a clean revert removes the state file");
        // A restore that fails keeps its line.
        let mut j = Journal::create(&state, "test").unwrap();
        j.append(Entry { kind: "command".into(), key: "x".into(), previous: "exit 3".into() }).unwrap();
        let e = j.revert().unwrap_err();
        assert!(e.message.contains("could not restore 1"), "{e}");
        assert_eq!(Journal::open(&state).unwrap().entries().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
