//! `uringbench experiment PLAN.toml`: named variants of host settings, each applied before its
//! runs and reverted after, with the runs interleaved in a randomised block order. The caller
//! compares the variants' runs (`analysis::compare::compare_experiment`).
//!
//! A block runs every variant once, in an order drawn from a seeded ChaCha8 stream (A B C,
//! C A B, ...), so a drift of the host over time spreads over all variants instead of
//! favouring the one that ran first. Before each measured run the variant's settings are
//! applied through a [`Journal`] (recorded, then changed), `warmup_runs` runs are made and
//! discarded (the host settles after a change), the run is measured, and the settings are
//! reverted. The journal's state file lets an interrupted experiment be undone.
//!
//! A variant may also name a receiver-side variant (`receiver = "NAME"`): the name travels in
//! the test spec, and the receiver applies the settings its own `recv --variants` file gives
//! that name. The sender never sends a setting or a command.

use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, TestSpec, Workload, ZeroCopyMode};
use crate::base::stop::StopToken;
use crate::base::units::{parse_cpu_list, parse_duration, parse_rate, parse_size};
use crate::metrics::document::RunRecord;
use crate::session::sender::SendOptions;
use crate::sys::probe::KernelCaps;
use crate::sys::settings::{Change, SettingsSpec, SharedJournal};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

/// The test every run of the experiment makes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanTest {
    pub target: String,
    /// [default: 5300, or the peer's own port]
    pub port: Option<u16>,
    /// The far end when it is not `uringbench recv`: `iperf2`, `iperf3` or `ntttcp`.
    pub peer: Option<String>,
    /// `tcp` or `udp`.
    #[serde(default = "default_proto")]
    pub proto: String,
    /// `stream`, `rr` or `crr`.
    #[serde(default = "default_workload")]
    pub workload: String,
    #[serde(default = "one")]
    pub queues: u32,
    #[serde(default = "one")]
    pub flows_per_queue: u32,
    #[serde(default = "default_time")]
    pub time: String,
    #[serde(default = "default_warmup")]
    pub warmup: String,
    #[serde(default = "default_cooldown")]
    pub cooldown: String,
    /// Bytes per send or datagram [default: 128K TCP, 1470 UDP].
    pub len: Option<String>,
    /// Total offered rate, e.g. `2G` [default: unlimited].
    #[serde(default = "default_rate")]
    pub rate: String,
    #[serde(default = "yes")]
    pub gso: bool,
    pub cpus: Option<String>,
    /// rr/crr request and response sizes.
    #[serde(default = "one")]
    pub req: u32,
    #[serde(default = "one")]
    pub resp: u32,
    /// Stream tests: run the latency probe beside the load (`send --latency`), so the
    /// comparison carries loaded p99 and RPM.
    #[serde(default)]
    pub latency: bool,
}

/// Measured runs per variant when the plan does not say: enough for the rank test that judges
/// the comparison to reach p < 0.05 (it needs 4 a side; with 5 its smallest p is 0.008).
pub const DEFAULT_RUNS: u32 = 5;

/// The far end of an experiment's runs when it is another tool (`peer` in `[test]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerTool {
    /// `iperf -s` (`send --iperf2`).
    Iperf2,
    /// `iperf3 -s` (`send --iperf3`).
    Iperf3,
    /// NTttcp receivers in no-sync mode (`send --ntttcp`); `port` is their first port.
    Ntttcp,
}

impl PeerTool {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "iperf2" => Some(PeerTool::Iperf2),
            "iperf3" => Some(PeerTool::Iperf3),
            "ntttcp" => Some(PeerTool::Ntttcp),
            _ => None,
        }
    }

    /// The port that tool listens on unless told otherwise.
    fn default_port(self) -> u16 {
        match self {
            PeerTool::Iperf2 => crate::wire::iperf2::IPERF2_PORT,
            PeerTool::Iperf3 => crate::wire::iperf3::IPERF3_PORT,
            PeerTool::Ntttcp => crate::wire::NTTTCP_PORT,
        }
    }
}
fn default_proto() -> String {
    "tcp".into()
}
fn default_workload() -> String {
    "stream".into()
}
fn one() -> u32 {
    1
}
fn default_time() -> String {
    "10s".into()
}
fn default_warmup() -> String {
    "1s".into()
}
fn default_cooldown() -> String {
    "250ms".into()
}
fn default_rate() -> String {
    "0".into()
}
fn yes() -> bool {
    true
}

/// One named variant.
#[derive(Debug, Clone)]
pub struct PlanVariant {
    pub name: String,
    /// The receiver's variant (from its `recv --variants` file), if any.
    pub receiver: Option<String>,
    /// `congestion = "cubic"`: the congestion control of this variant's flows, set on each
    /// socket (TCP_CONGESTION, as `send -C`): a network namespace may select by sysctl only
    /// the host's allowed ones, a socket of a privileged sender any loaded one.
    pub congestion: Option<String>,
    pub settings: SettingsSpec,
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub runs: u32,
    pub warmup_runs: u32,
    pub seed: u64,
    pub test: PlanTest,
    pub variants: Vec<PlanVariant>,
}

/// Top-level keys of a plan, for the error that names an unknown one.
const PLAN_KEYS: &[&str] = &["runs", "warmup_runs", "seed", "test", "variant"];

impl Plan {
    pub fn parse(text: &str) -> Result<Self> {
        let usage = |m: String| Error::usage(m);
        let doc: toml::Table = toml::from_str(text).map_err(|e| usage(format!("not a plan: {e}")))?;
        if let Some(k) = doc.keys().find(|k| !PLAN_KEYS.contains(&k.as_str())) {
            return Err(usage(format!("unknown key '{k}' (a plan has {})", PLAN_KEYS.join(", "))));
        }
        let int = |k: &str, default: i64| -> Result<i64> {
            match doc.get(k) {
                None => Ok(default),
                Some(v) => {
                    v.as_integer().filter(|n| *n >= 0).ok_or_else(|| usage(format!("'{k}' must be a whole number")))
                }
            }
        };
        let runs =
            u32::try_from(int("runs", i64::from(DEFAULT_RUNS))?).map_err(|_| usage("'runs' is too large".into()))?;
        let warmup_runs =
            u32::try_from(int("warmup_runs", 1)?).map_err(|_| usage("'warmup_runs' is too large".into()))?;
        let seed = int("seed", crate::metrics::summary::DEFAULT_SEED as i64 & i64::MAX)? as u64;
        if runs == 0 {
            return Err(usage("'runs' must be at least 1".into()));
        }
        let test: PlanTest = doc
            .get("test")
            .ok_or_else(|| usage("the plan has no [test] table".into()))?
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| usage(format!("[test]: {}", e.message())))?;
        let list =
            doc.get("variant").and_then(|v| v.as_array()).ok_or_else(|| usage("the plan has no [[variant]]".into()))?;
        let mut variants = Vec::new();
        for (i, v) in list.iter().enumerate() {
            let mut table = v.as_table().cloned().ok_or_else(|| usage(format!("variant {} is not a table", i + 1)))?;
            let name = match table.remove("name") {
                Some(toml::Value::String(s))
                    if !s.is_empty() && s.len() <= 64 && !s.contains(['\t', '\n', ',', '=']) =>
                {
                    s
                }
                _ => {
                    return Err(usage(format!(
                        "variant {} needs a name (1 to 64 characters, no tab, comma or =)",
                        i + 1
                    )))
                }
            };
            let receiver = match table.remove("receiver") {
                None => None,
                Some(toml::Value::String(s)) if crate::sys::settings::valid_variant_name(&s) => Some(s),
                Some(_) => {
                    return Err(usage(format!("variant {name}: 'receiver' must be a variant name of recv --variants")))
                }
            };
            let congestion = match table.remove("congestion") {
                None => None,
                Some(toml::Value::String(s))
                    if !s.is_empty() && s.len() < 16 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                {
                    Some(s)
                }
                Some(_) => {
                    return Err(usage(format!(
                        "variant {name}: 'congestion' must name a congestion control, e.g. \"cubic\""
                    )))
                }
            };
            let settings: SettingsSpec = toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| usage(format!("variant {name}: {}", e.message())))?;
            let changes = settings.changes().map_err(|e| usage(format!("variant {name}: {}", e.message)))?;
            if variants.iter().any(|v: &PlanVariant| v.name == name) {
                return Err(usage(format!("two variants are named {name}")));
            }
            variants.push(PlanVariant { name, receiver, congestion, settings, changes });
        }
        if variants.len() < 2 {
            return Err(usage("an experiment needs at least two variants".into()));
        }
        let plan = Plan { runs, warmup_runs, seed, test, variants };
        plan.checked_test()?;
        Ok(plan)
    }

    /// The far end's tool, when `[test]` names one.
    pub fn peer(&self) -> Option<PeerTool> {
        self.test.peer.as_deref().and_then(PeerTool::parse)
    }

    /// The sender's options for every run (the variant's receiver name is added per run), on
    /// this host's kernel as probed once (`kernel`).
    pub(crate) fn send_options(&self, kernel: KernelCaps) -> Result<SendOptions> {
        let (spec, port, cpus) = self.checked_test()?;
        Ok(SendOptions {
            target: self.test.target.clone(),
            port,
            spec,
            cpus,
            busy_poll: crate::runtime::placement::BusyPoll::Auto,
            local: Default::default(),
            fast: Default::default(),
            kernel,
            psk: None,
            stop: StopToken::new(),
        })
    }

    /// `[test]` read and checked: the test, the port (the peer tool's when none is given) and
    /// the CPUs.
    fn checked_test(&self) -> Result<(TestSpec, u16, Option<Vec<usize>>)> {
        let t = &self.test;
        let usage = |m: String| Error::usage(format!("[test]: {m}"));
        let peer = match t.peer.as_deref() {
            None => None,
            Some(name) => Some(PeerTool::parse(name).ok_or_else(|| {
                usage(format!("peer '{name}': iperf2, iperf3 or ntttcp (or no peer: uringbench recv)"))
            })?),
        };
        if peer.is_some() && t.workload != "stream" {
            return Err(usage(format!("workload '{}' needs uringbench recv on the far end (no peer)", t.workload)));
        }
        let proto = match t.proto.as_str() {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            other => return Err(usage(format!("proto '{other}': tcp or udp"))),
        };
        let workload = match t.workload.as_str() {
            "stream" => Workload::Stream,
            "rr" => Workload::Rr,
            "crr" => Workload::Crr,
            other => return Err(usage(format!("workload '{other}': stream, rr or crr"))),
        };
        let len = match &t.len {
            Some(l) => parse_size(l).map_err(|e| usage(e.message))?,
            None if proto == Proto::Udp => 1470,
            None => 128 * 1024,
        };
        let ms = |d: &str| parse_duration(d).map(|d| d.as_millis() as u64).map_err(|e| usage(e.message));
        let spec = TestSpec {
            proto,
            workload,
            queues: t.queues,
            flows_per_queue: t.flows_per_queue,
            time_ms: ms(&t.time)?,
            warmup_ms: ms(&t.warmup)?,
            cooldown_ms: ms(&t.cooldown)?,
            len: u32::try_from(len).map_err(|_| usage(format!("len {len} too large")))?,
            rate_bps: parse_rate(&t.rate).map_err(|e| usage(e.message))?,
            zerocopy: ZeroCopyMode::Auto,
            gso: t.gso,
            req_len: t.req,
            resp_len: t.resp,
            latency: t.latency,
            ..TestSpec::default()
        };
        spec.validate().map_err(|e| usage(e.message))?;
        let port = t.port.unwrap_or_else(|| peer.map_or(crate::session::control::DEFAULT_PORT, PeerTool::default_port));
        let cpus = t.cpus.as_deref().map(parse_cpu_list).transpose().map_err(|e| usage(e.message))?;
        Ok((spec, port, cpus))
    }

    /// The order of the variants in each block.
    pub fn block_orders(&self) -> Vec<Vec<usize>> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        (0..self.runs)
            .map(|_| {
                let mut order: Vec<usize> = (0..self.variants.len()).collect();
                order.shuffle(&mut rng);
                order
            })
            .collect()
    }
}

/// What happened in one step, for the caller to print.
#[derive(Debug)]
pub enum Progress<'a> {
    Applied { variant: &'a str, what: &'a [String] },
    Run { block: u32, blocks: u32, variant: &'a str, warmup: bool, doc: &'a RunRecord },
    Reverted { variant: &'a str, count: usize },
}

/// The measured runs of one variant and the settings it ran with.
#[derive(Debug, Clone)]
pub struct VariantRuns {
    pub name: String,
    pub receiver: Option<String>,
    /// The changes as planned.
    pub settings: Vec<String>,
    /// What the first application did, with the previous values.
    pub applied: Vec<String>,
    /// The measured runs (warm-up runs are not kept).
    pub runs: Vec<RunRecord>,
}

#[derive(Debug, Clone)]
pub struct ExperimentResult {
    pub seed: u64,
    pub warmup_runs: u32,
    pub orders: Vec<Vec<String>>,
    pub variants: Vec<VariantRuns>,
    pub test: TestSpec,
    pub target: String,
}

/// Runs the experiment. `run_test` runs one test (a stream, rr or crr) and returns its
/// document. A variant's first run failing ends the experiment (nothing to compare against,
/// or the receiver refused its variant); later failures are kept as incomplete runs. The journal is
/// left empty (everything reverted) however this returns.
pub fn run(
    plan: &Plan,
    kernel: KernelCaps,
    journal: &SharedJournal,
    stop: &StopToken,
    mut run_test: impl FnMut(&SendOptions) -> Result<RunRecord>,
    mut progress: impl FnMut(Progress),
) -> Result<ExperimentResult> {
    let base = SendOptions { stop: stop.clone(), ..plan.send_options(kernel)? };
    let orders = plan.block_orders();
    let mut variants: Vec<VariantRuns> = plan
        .variants
        .iter()
        .map(|v| VariantRuns {
            name: v.name.clone(),
            receiver: v.receiver.clone(),
            settings: v
                .changes
                .iter()
                .map(Change::describe)
                .chain(v.congestion.iter().map(|cc| format!("congestion control {cc} on every flow (TCP_CONGESTION)")))
                .collect(),
            applied: Vec::new(),
            runs: Vec::new(),
        })
        .collect();
    let lock = || journal.lock().unwrap_or_else(|p| p.into_inner());
    let revert = |name: &str, progress: &mut dyn FnMut(Progress)| -> Result<()> {
        let done = lock().revert()?;
        if !done.is_empty() {
            progress(Progress::Reverted { variant: name, count: done.len() });
        }
        Ok(())
    };
    // A variant whose first run fails ends the experiment: there would be nothing to compare
    // (the receiver refused its variant, or the variant broke the path).
    let mut tried = vec![false; plan.variants.len()];
    'blocks: for (b, order) in orders.iter().enumerate() {
        for &vi in order {
            let v = &plan.variants[vi];
            let mut applied = Vec::new();
            for change in &v.changes {
                let outcome = lock().apply(change);
                match outcome {
                    Ok(Some(what)) => applied.push(what),
                    Ok(None) => applied.push(format!("{} (already so)", change.describe())),
                    Err(e) => {
                        let undo = lock().revert();
                        let e = Error { message: format!("variant {}: {}", v.name, e.message), ..e };
                        return Err(match undo {
                            Ok(_) => e,
                            Err(u) => Error { message: format!("{}; and {}", e.message, u.message), ..e },
                        });
                    }
                }
            }
            if !applied.is_empty() {
                progress(Progress::Applied { variant: &v.name, what: &applied });
            }
            if let Some(cc) = &v.congestion {
                applied.push(format!("congestion control {cc} on every flow (TCP_CONGESTION)"));
            }
            if variants[vi].applied.is_empty() {
                variants[vi].applied = applied;
            }
            let mut spec = TestSpec { variant: v.receiver.clone(), ..base.spec.clone() };
            if let Some(cc) = &v.congestion {
                spec.tuning.congestion = Some(cc.clone());
            }
            let opts = SendOptions { spec, ..base.clone() };
            for n in 0..=plan.warmup_runs {
                let warmup = n < plan.warmup_runs;
                let doc = match run_test(&opts) {
                    Ok(doc) => doc,
                    Err(e) if !tried[vi] => {
                        let undo = lock().revert();
                        return Err(match undo {
                            Ok(_) => Error { message: format!("variant {}: {}", v.name, e.message), ..e },
                            Err(u) => {
                                Error { message: format!("variant {}: {}; and {}", v.name, e.message, u.message), ..e }
                            }
                        });
                    }
                    Err(e) => RunRecord::failed(e.message),
                };
                tried[vi] = true;
                progress(Progress::Run { block: b as u32 + 1, blocks: plan.runs, variant: &v.name, warmup, doc: &doc });
                if !warmup {
                    variants[vi].runs.push(doc);
                }
                if stop.is_stopped() {
                    break;
                }
            }
            revert(&v.name, &mut progress)?;
            if stop.is_stopped() {
                // The run that saw the stop is kept as far as it got; no more runs.
                break 'blocks;
            }
        }
    }
    Ok(ExperimentResult {
        seed: plan.seed,
        warmup_runs: plan.warmup_runs,
        orders: orders.iter().map(|o| o.iter().map(|&i| plan.variants[i].name.clone()).collect()).collect(),
        variants,
        test: base.spec,
        target: base.target,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const PLAN: &str = r#"
        runs = 4
        seed = 9
        [test]
        target = "10.77.0.2"
        time = "1s"
        [[variant]]
        name = "base"
        [[variant]]
        name = "marked"
        receiver = "gro-on"
        [[variant.commands]]
        apply = "echo on > $UB_MARK"
        revert = "rm -f $UB_MARK"
    "#;

    #[test]
    fn plans_parse_and_refuse_mistakes() {
        let p = Plan::parse(PLAN).unwrap();
        assert_eq!((p.runs, p.warmup_runs, p.variants.len()), (4, 1, 2));
        assert_eq!(p.variants[1].receiver.as_deref(), Some("gro-on"));
        let o = p.send_options(KernelCaps::detect().unwrap()).unwrap();
        assert_eq!((o.spec.time_ms, o.spec.len, o.port), (1000, 128 * 1024, 5300));
        let orders = p.block_orders();
        assert_eq!(orders, p.block_orders(), "seeded order");
        assert!(orders.iter().all(|o| {
            let mut s = o.clone();
            s.sort();
            s == [0, 1]
        }));
        for (text, want) in [
            ("runs = 2\n[test]\ntarget = \"x\"\n[[variant]]\nname = \"a\"", "at least two variants"),
            ("colour = 1", "unknown key 'colour'"),
            ("[[variant]]\nname = \"a\"", "no [test]"),
            (
                "[test]\ntarget = \"x\"\nspeed = 1\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"",
                "unknown field",
            ),
            ("[test]\ntarget = \"x\"\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"a\"", "two variants"),
            ("[test]\ntarget = \"x\"\n[[variant]]\nname = \"a\"\nsysctls = 1\n[[variant]]\nname = \"b\"", "variant a"),
            (
                "[test]\ntarget = \"x\"\nproto = \"sctp\"\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"",
                "tcp or udp",
            ),
        ] {
            let e = Plan::parse(text).unwrap_err();
            assert!(e.message.contains(want), "{text}: {e}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn a_peer_tool_brings_its_port_and_needs_a_stream_test() {
        let plan = |test: &str| {
            format!("[test]\ntarget = \"x\"\n{test}\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"")
        };
        for (peer, tool, port) in
            [("iperf2", PeerTool::Iperf2, 5001), ("iperf3", PeerTool::Iperf3, 5201), ("ntttcp", PeerTool::Ntttcp, 5001)]
        {
            let p = Plan::parse(&plan(&format!("peer = \"{peer}\""))).unwrap();
            assert_eq!((p.peer(), p.send_options(KernelCaps::detect().unwrap()).unwrap().port), (Some(tool), port));
        }
        let p = Plan::parse(&plan("peer = \"iperf3\"\nport = 6000")).unwrap();
        assert_eq!(p.send_options(KernelCaps::detect().unwrap()).unwrap().port, 6000, "a port given wins");
        assert_eq!(Plan::parse(&plan("")).unwrap().peer(), None);
        let e = Plan::parse(&plan("peer = \"netperf\"")).unwrap_err();
        assert!(e.message.contains("iperf2, iperf3 or ntttcp"), "{e}");
        let e = Plan::parse(&plan("peer = \"iperf3\"\nworkload = \"rr\"")).unwrap_err();
        assert!(e.message.contains("needs uringbench recv"), "{e}");
    }
}
