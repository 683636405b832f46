//! `uringbench report --fleet DIR`: merges what the Ansible `run` role collected from many
//! hosts into one report: a row per pair (plan entry, sender, receiver, address), summaries by a host
//! attribute (vCPUs, machine type, ...) and by address, the failed runs, and the merged data
//! as JSON ([`FleetReport::to_document`]), CSV ([`csv`]) and SVG ([`heatmap`], plus
//! [`FleetReport::attribute_chart`]).
//!
//! The folder holds `plan.json` (every planned run, written before the first run starts) and
//! `runs/ID.json` (one record per run that was attempted: the sender's `send -J` document, its
//! exit status and both hosts' facts). A planned run without a record, with a non-zero exit,
//! an incomplete document, or TCP totals that differ between the two ends, is a failed run.

pub mod csv;
pub mod heatmap;
mod records;
mod stream;

use crate::base::error::{Error, Result};
use crate::base::spec::Proto;
use crate::metrics::document::{FleetRunRecord, Kind, Tool};
use crate::metrics::run_figures::RunFigures;
use crate::metrics::summary::{RunsSummary, Stats};
use crate::report::chart::{Axis, Chart, Point, Series};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use records::*;
pub use records::{FailedFleetRun, FleetDocument};
pub use stream::FmtIo;

/// A host's facts as its run records gave them: one value per host, shared by every run of
/// it (a million runs over a thousand hosts hold a thousand of them, not two million).
pub type Facts = Arc<Map<String, Value>>;

/// Version of `plan.json`, the run records and the merged document.
pub use crate::metrics::figures::SCHEMA_VERSION;

/// One planned run and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FleetRun {
    pub id: String,
    /// The plan entry it came from.
    pub entry: String,
    pub sender: String,
    pub receiver: String,
    /// `internal`, `external` or the inventory variable that held the address.
    pub address: String,
    /// The address the sender connected to (None when the run never got that far).
    pub target: Option<String>,
    /// 1-based repeat of this pair.
    pub repeat: u64,
    /// The other tool the run measured against (`iperf2`, `iperf3`, `ntttcp`: the plan's
    /// `peer`), None for `uringbench recv`.
    #[serde(default)]
    pub peer: Option<String>,
    /// The figures of its `send -J` document (`complete`, the bit rates, CPU per byte, the
    /// verdict...); their `error` says why the run failed (None when it did not).
    #[serde(flatten)]
    pub figures: RunFigures,
    /// TCP: the sender's and the receiver's totals are equal; None for UDP, no document, or
    /// a peer whose counts cannot be compared (it reports no receiver side to us, or it
    /// omitted a warm-up by its own clock).
    pub exact: Option<bool>,
    pub sender_total_bytes: Option<u64>,
    pub receiver_total_bytes: Option<u64>,
    pub sender_facts: Facts,
    pub receiver_facts: Facts,
}

impl FleetRun {
    pub fn failed(&self) -> bool {
        self.figures.error.is_some()
    }

    /// A host attribute: `NAME` is the sender's fact, `receiver.NAME` the receiver's, and
    /// `address` the address kind, `entry` the plan entry. None when the host did not
    /// report it.
    pub fn attribute(&self, attr: &str) -> Option<String> {
        match attr {
            "address" => return Some(self.address.clone()),
            "entry" => return Some(self.entry.clone()),
            "peer" => return Some(self.peer.clone().unwrap_or_else(|| "uringbench".into())),
            _ => {}
        }
        let (facts, name) = match attr.strip_prefix("receiver.") {
            Some(name) => (&self.receiver_facts, name),
            None => (&self.sender_facts, attr.strip_prefix("sender.").unwrap_or(attr)),
        };
        facts.get(name).and_then(fact_text)
    }
}

fn fact_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// One ordered pair over one kind of address, in one plan entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairSummary {
    pub entry: String,
    pub sender: String,
    pub receiver: String,
    pub address: String,
    #[serde(flatten)]
    pub figures: RunsSummary,
}

/// The runs sharing one value of an attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttributeGroup {
    pub value: String,
    /// Distinct (sender, receiver, address) pairs among the runs.
    pub pairs: usize,
    #[serde(flatten)]
    pub figures: RunsSummary,
}

/// A summary by one attribute, and inside it by address when the plan used several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttributeSummary {
    pub attribute: String,
    pub groups: Vec<AttributeGroup>,
    /// Per address kind (only when the runs used more than one): the same groups.
    pub by_address: BTreeMap<String, Vec<AttributeGroup>>,
}

/// The merged report of a fleet run.
#[derive(Debug, Clone)]
pub struct FleetReport {
    /// Every planned run, in plan order.
    pub runs: Vec<FleetRun>,
    pub pairs: Vec<PairSummary>,
    pub summaries: Vec<AttributeSummary>,
}

/// Attributes summarised when none is asked for: the address kind and the sender's vCPUs
/// (what the cloud labs compare: internal against external, cores against throughput).
pub(crate) const DEFAULT_ATTRIBUTES: &[&str] = &["address", "vcpus"];

impl FleetReport {
    /// Reads `DIR/plan.json` (parsed as it is read, never held as text or a tree), then each
    /// planned run's record `DIR/runs/ID.json` one at a time, keeping only its figures (the
    /// documents are dropped as they are read) and its hosts' facts, shared per host; and
    /// summarises by `attributes` (None: those of [`DEFAULT_ATTRIBUTES`] that some host
    /// reported). Memory grows with the runs' figures and the hosts, not the documents.
    pub fn load(dir: &Path, attributes: Option<&[String]>) -> Result<Self> {
        Self::load_reporting(dir, attributes, &mut |_, _| {})
    }

    /// [`load`](Self::load), calling `read(k, n)` after the k-th of the n planned runs'
    /// records is read (the front end's progress line: a million records take minutes).
    pub fn load_reporting(
        dir: &Path,
        attributes: Option<&[String]>,
        read: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let plan_path = dir.join("plan.json");
        if !plan_path.exists() {
            return Err(Error::usage(format!(
                "{}: no plan.json (not a folder the Ansible run role wrote)",
                dir.display()
            )));
        }
        let planned = read_plan(&plan_path)?;
        let runs_dir = dir.join("runs");
        let mut facts = HostFacts::default();
        let total = planned.len();
        let mut runs = Vec::with_capacity(total);
        for p in planned {
            let record = match p.id.as_deref().filter(|id| is_record_name(id)) {
                Some(id) => read_record(&runs_dir.join(format!("{id}.json")))?,
                None => None,
            };
            runs.push(run_of(&p, record, &mut facts)?);
            read(runs.len(), total);
        }
        Self::of_runs(runs, attributes)
    }

    /// Merges a plan with the run records (by run id), held in memory (the unit tests).
    #[cfg(test)]
    pub(crate) fn merge(
        plan: &Value,
        records: &BTreeMap<String, FleetRunRecord>,
        attributes: Option<&[String]>,
    ) -> Result<Self> {
        let planned = planned_runs(plan)?;
        let mut facts = HostFacts::default();
        let mut runs = Vec::with_capacity(planned.len());
        for p in &planned {
            runs.push(run_of(p, p.id.as_ref().and_then(|id| records.get(id)).cloned(), &mut facts)?);
        }
        Self::of_runs(runs, attributes)
    }

    /// An attribute asked for that no run has is a usage error (a typo, most likely).
    pub(crate) fn of_runs(runs: Vec<FleetRun>, attributes: Option<&[String]>) -> Result<Self> {
        let mut pairs: Vec<PairSummary> = pair_members(&runs)
            .into_iter()
            .map(|members| {
                let r = &runs[members[0]];
                PairSummary {
                    entry: r.entry.clone(),
                    sender: r.sender.clone(),
                    receiver: r.receiver.clone(),
                    address: r.address.clone(),
                    figures: RunsSummary::of(members.iter().map(|&i| &runs[i].figures)),
                }
            })
            .collect();
        let addresses: Vec<String> = distinct(runs.iter().map(|r| r.address.clone()));
        // Rows by plan entry and address as planned, then by sender and receiver (parallel
        // batches run the pairs out of that order).
        let entries: Vec<String> = distinct(runs.iter().map(|r| r.entry.clone()));
        let rank = |list: &[String], v: &str| list.iter().position(|x| x == v).unwrap_or(0);
        pairs.sort_by(|a, b| {
            (rank(&entries, &a.entry), rank(&addresses, &a.address), &a.sender, &a.receiver).cmp(&(
                rank(&entries, &b.entry),
                rank(&addresses, &b.address),
                &b.sender,
                &b.receiver,
            ))
        });
        let mut summaries = Vec::new();
        let defaults: Vec<String> = DEFAULT_ATTRIBUTES
            .iter()
            .map(|a| a.to_string())
            .filter(|a| runs.iter().any(|r| r.attribute(a).is_some()))
            .collect();
        for attr in attributes.unwrap_or(&defaults) {
            if runs.iter().all(|r| r.attribute(attr).is_none()) {
                let mut known: Vec<String> = runs.iter().flat_map(|r| r.sender_facts.keys().cloned()).collect();
                known.sort();
                known.dedup();
                known.splice(0..0, ["address".to_string(), "entry".to_string()]);
                return Err(Error::usage(format!(
                    "no host has the attribute '{attr}' (known: {}; receiver.NAME for the receiver's)",
                    known.join(", ")
                )));
            }
            let groups = attribute_groups(runs.iter(), attr);
            let mut by_address = BTreeMap::new();
            if addresses.len() > 1 && attr != "address" && attr != "entry" {
                for a in &addresses {
                    by_address.insert(a.clone(), attribute_groups(runs.iter().filter(|r| &r.address == a), attr));
                }
            }
            summaries.push(AttributeSummary { attribute: attr.clone(), groups, by_address });
        }
        Ok(Self { runs, pairs, summaries })
    }

    pub fn failed(&self) -> Vec<&FleetRun> {
        self.runs.iter().filter(|r| r.failed()).collect()
    }

    fn failed_runs(&self) -> Vec<FailedFleetRun> {
        self.failed()
            .iter()
            .map(|r| FailedFleetRun {
                id: r.id.clone(),
                sender: r.sender.clone(),
                receiver: r.receiver.clone(),
                address: r.address.clone(),
                repeat: r.repeat,
                error: r.figures.error.clone(),
            })
            .collect()
    }

    /// The merged document: every run with its figures and facts, the pairs, the summaries
    /// (a copy of them all: `report --fleet` writes [`FleetReport::write_document`] instead).
    pub fn to_document(&self) -> FleetDocument {
        let failed = self.failed_runs();
        FleetDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Fleet,
            tool: Tool::this(),
            planned_runs: self.runs.len(),
            complete_runs: self.runs.len() - failed.len(),
            failed_runs: failed,
            pairs: self.pairs.clone(),
            summaries: self.summaries.clone(),
            runs: self.runs.clone(),
        }
    }

    /// Text: the pair table, one table per summary, and the failed runs.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = self.write_text(&mut out);
        out
    }

    /// [`FleetReport::render_text`] written as it is made (a pair a line: a million of them
    /// go to stdout, not into a string first).
    pub fn write_text(&self, out: &mut dyn std::fmt::Write) -> std::fmt::Result {
        let failed = self.failed().len();
        writeln!(
            out,
            "fleet: {} planned runs, {} complete, {failed} failed, {} pairs\n",
            self.runs.len(),
            self.runs.len() - failed,
            self.pairs.len()
        )?;
        let w = self.pairs.iter().map(|p| p.sender.len() + p.receiver.len() + 4).max().unwrap_or(4).max(4);
        // The entry column only when the plan had several (their options differ).
        let entries = distinct(self.pairs.iter().map(|p| p.entry.clone()));
        let ew = if entries.len() > 1 { entries.iter().map(String::len).max().unwrap_or(0).max(5) + 2 } else { 0 };
        writeln!(
            out,
            "{:<ew$}{:<w$}  {:<10} {:>5}  {:<28} {:<26} {:<6} verdict",
            if ew > 0 { "entry" } else { "" },
            "pair",
            "address",
            "runs",
            "Gbit/s median [min-max]",
            "CPU-s/GB median [min-max]",
            "exact"
        )?;
        let mut by_pair: std::collections::HashMap<(&str, &str, &str, &str), Vec<&FleetRun>> = Default::default();
        for r in &self.runs {
            by_pair.entry((&r.entry, &r.sender, &r.receiver, &r.address)).or_default().push(r);
        }
        for p in &self.pairs {
            let runs = by_pair.get(&(&*p.entry, &*p.sender, &*p.receiver, &*p.address)).cloned().unwrap_or_default();
            let exact = match runs.iter().filter_map(|r| r.exact).collect::<Vec<bool>>() {
                v if v.is_empty() => "-",
                v if v.iter().all(|e| *e) => "yes",
                _ => "NO",
            };
            writeln!(
                out,
                "{:<ew$}{:<w$}  {:<10} {:>5}  {:<28} {:<26} {:<6} {}",
                if ew > 0 { p.entry.as_str() } else { "" },
                format!("{} -> {}", p.sender, p.receiver),
                p.address,
                format!("{}/{}", p.figures.complete_runs, p.figures.runs),
                gbps_range(p.figures.receiver_bits_per_second),
                cpu_range(p.figures.cpu_seconds_per_gb),
                exact,
                p.figures.verdicts.first().map_or("-", String::as_str)
            )?;
        }
        for s in &self.summaries {
            writeln!(out, "\nby {}:", attribute_title(&s.attribute))?;
            render_groups(out, &s.attribute, &s.groups)?;
            for (addr, groups) in &s.by_address {
                writeln!(out, "\nby {}, {addr} address:", attribute_title(&s.attribute))?;
                render_groups(out, &s.attribute, groups)?;
            }
        }
        let failed = self.failed();
        if !failed.is_empty() {
            writeln!(out, "\nfailed runs ({} of {}):", failed.len(), self.runs.len())?;
            for r in failed {
                writeln!(
                    out,
                    "  {} {} -> {} {} repeat {}: {}",
                    r.id,
                    r.sender,
                    r.receiver,
                    r.address,
                    r.repeat,
                    r.figures.error.as_deref().unwrap_or("")
                )?;
            }
        }
        Ok(())
    }

    /// Received Gbit/s against an attribute's values: one series per address kind (medians
    /// over the complete runs, min–max bars).
    pub fn attribute_chart(&self, attr: &str) -> Chart {
        let summary = self.summaries.iter().find(|s| s.attribute == attr);
        let groups = summary.map(|s| s.groups.clone()).unwrap_or_default();
        let categories: Vec<String> = groups.iter().map(|g| g.value.clone()).collect();
        let point = |x: usize, g: &AttributeGroup| {
            g.figures.receiver_bits_per_second.map(|st| Point {
                x,
                y: st.median / 1e9,
                min: Some(st.min / 1e9),
                max: Some(st.max / 1e9),
            })
        };
        let mut series = Vec::new();
        match summary.filter(|s| !s.by_address.is_empty()) {
            Some(s) => {
                for (addr, groups) in &s.by_address {
                    let points = groups
                        .iter()
                        .filter_map(|g| {
                            let x = categories.iter().position(|c| *c == g.value)?;
                            point(x, g)
                        })
                        .collect();
                    series.push(Series {
                        key: format!("receiver_gbps_{}", key_of(addr)),
                        name: format!("received Gbit/s, {addr}"),
                        axis: Axis::Left,
                        points,
                    });
                }
            }
            None => series.push(Series {
                key: "receiver_gbps".into(),
                name: "received Gbit/s".into(),
                axis: Axis::Left,
                points: groups.iter().enumerate().filter_map(|(x, g)| point(x, g)).collect(),
            }),
        }
        Chart {
            title: format!(
                "uringbench fleet: received Gbit/s by {} ({} runs, median, min-max)",
                attribute_title(attr),
                self.runs.len()
            ),
            x_label: attribute_title(attr),
            categories,
            left_label: "received Gbit/s".into(),
            right_label: None,
            series,
        }
    }
}

fn key_of(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

fn attribute_title(attr: &str) -> String {
    match attr.strip_prefix("receiver.") {
        Some(name) => format!("receiver {name}"),
        None if attr == "address" || attr == "entry" => attr.into(),
        None => format!("sender {}", attr.strip_prefix("sender.").unwrap_or(attr)),
    }
}

/// The values in first-seen order, each once (hashed: a million runs stay linear).
fn distinct(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    values.filter(|v| seen.insert(v.clone())).collect()
}

/// The indices of each pair's runs (same entry, hosts, direction and address), pairs in
/// first-seen order.
fn pair_members(runs: &[FleetRun]) -> Vec<Vec<usize>> {
    let mut index: std::collections::HashMap<(&str, &str, &str, &str), usize> = Default::default();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let n = *index.entry((&r.entry, &r.sender, &r.receiver, &r.address)).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[n].push(i);
    }
    out
}

/// The group of runs whose host did not report the attribute.
const UNKNOWN: &str = "unknown";

/// Groups runs by an attribute's value, sorted numerically when every value is a number.
fn attribute_groups<'a>(runs: impl Iterator<Item = &'a FleetRun>, attr: &str) -> Vec<AttributeGroup> {
    let runs: Vec<&FleetRun> = runs.collect();
    let mut values = distinct(runs.iter().map(|r| r.attribute(attr).unwrap_or_else(|| UNKNOWN.into())));
    let unknown = values.iter().any(|v| v == UNKNOWN);
    values.retain(|v| v != UNKNOWN);
    if values.iter().all(|v| v.parse::<f64>().is_ok()) {
        values.sort_by(|a, b| a.parse::<f64>().unwrap_or(0.0).total_cmp(&b.parse::<f64>().unwrap_or(0.0)));
    } else {
        values.sort();
    }
    // Runs whose record (and so the hosts' facts) never came back go last.
    if unknown {
        values.push(UNKNOWN.into());
    }
    values
        .into_iter()
        .map(|v| {
            let members: Vec<&FleetRun> =
                runs.iter().copied().filter(|r| r.attribute(attr).unwrap_or_else(|| UNKNOWN.into()) == v).collect();
            let pairs =
                distinct(members.iter().map(|r| format!("{}\n{}\n{}\n{}", r.entry, r.sender, r.receiver, r.address)))
                    .len();
            AttributeGroup { value: v, pairs, figures: RunsSummary::of(members.iter().map(|r| &r.figures)) }
        })
        .collect()
}

fn gbps_range(st: Option<Stats>) -> String {
    st.map_or("-".into(), |s| format!("{:.2} [{:.2}-{:.2}]", s.median / 1e9, s.min / 1e9, s.max / 1e9))
}

fn cpu_range(st: Option<Stats>) -> String {
    st.map_or("-".into(), |s| format!("{:.3} [{:.3}-{:.3}]", s.median, s.min, s.max))
}

fn render_groups(out: &mut dyn std::fmt::Write, attr: &str, groups: &[AttributeGroup]) -> std::fmt::Result {
    let w = groups.iter().map(|g| g.value.len()).max().unwrap_or(0).max(attr.len()).max(5);
    writeln!(
        out,
        "{:<w$}  {:>5} {:>7}  {:<28} {:<26} verdicts",
        attr, "pairs", "runs", "Gbit/s median [min-max]", "CPU-s/GB median [min-max]"
    )?;
    for g in groups {
        writeln!(
            out,
            "{:<w$}  {:>5} {:>7}  {:<28} {:<26} {}",
            g.value,
            g.pairs,
            format!("{}/{}", g.figures.complete_runs, g.figures.runs),
            gbps_range(g.figures.receiver_bits_per_second),
            cpu_range(g.figures.cpu_seconds_per_gb),
            g.figures.verdicts.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::metrics::document::StreamDocument;
    use serde_json::json;

    /// A real TCP `send -J` document (captured from the release before the typed model) with
    /// the figures the merge reads set.
    pub(crate) fn doc(gbps: f64, sent: u64, counted: u64) -> Value {
        let mut d: StreamDocument =
            serde_json::from_str(include_str!("../../../tests/fixtures/53b0d44/stream-tcp.json")).unwrap();
        d.complete = true;
        d.error = None;
        d.sum.sender.bits_per_second = gbps * 1e9;
        d.sum.sender.total_bytes = sent;
        let receiver = d.sum.receiver.as_mut().unwrap();
        receiver.bits_per_second = gbps * 1e9;
        receiver.total_bytes = counted;
        d.cpu.receiver_per_byte.as_mut().unwrap().cpu_seconds_per_gb = 0.5;
        d.verdict.bottleneck = crate::metrics::verdict::Bottleneck::SenderCpu;
        serde_json::to_value(d).unwrap()
    }

    /// A run record as the Ansible run role writes it.
    fn record(v: Value) -> FleetRunRecord {
        serde_json::from_value(v).unwrap()
    }

    fn facts(vcpus: u64) -> Value {
        json!({"vcpus": vcpus, "machine_type": format!("lab-{vcpus}cpu"), "kernel": "6.18"})
    }

    pub(crate) fn plan_and_records() -> (Value, BTreeMap<String, FleetRunRecord>) {
        let hosts = [("h1", 1), ("h2", 2), ("h3", 2)];
        let mut planned = Vec::new();
        let mut records = BTreeMap::new();
        let mut n = 0;
        for repeat in 1..=2 {
            for (s, sv) in hosts {
                for (r, rv) in hosts {
                    if s == r {
                        continue;
                    }
                    for address in ["internal", "external"] {
                        n += 1;
                        let id = format!("{n:04}");
                        planned.push(json!({"id": id, "entry": "mesh", "sender": s, "receiver": r,
                            "address": address, "repeat": repeat}));
                        if s == "h3" && r == "h1" && address == "internal" {
                            continue; // never collected
                        }
                        let gbps = if address == "external" { 0.95 } else { 10.0 * sv as f64 + repeat as f64 };
                        let (document, rc, error) = if s == "h2" && r == "h3" && repeat == 2 {
                            (
                                Value::Null,
                                4,
                                json!("h2: unreachable: ssh: connect to host 10.0.0.2 port 22: Connection refused\n"),
                            )
                        } else {
                            (doc(gbps, 1000 + n, 1000 + n), 0, Value::Null)
                        };
                        records.insert(
                            id.clone(),
                            record(json!({"kind": "fleet-run", "id": id, "rc": rc, "error": error,
                            "target": format!("10.0.0.{rv}"), "document": document,
                            "sender_facts": facts(sv), "receiver_facts": facts(rv)})),
                        );
                    }
                }
            }
        }
        (json!({"kind": "fleet-plan", "schema_version": 1, "runs": planned}), records)
    }

    fn report() -> FleetReport {
        let (plan, records) = plan_and_records();
        let attrs: Vec<String> = ["address", "vcpus", "receiver.machine_type"].map(String::from).to_vec();
        FleetReport::merge(&plan, &records, Some(&attrs)).unwrap()
    }

    #[test]
    fn merges_plan_and_records_into_pairs() {
        let r = report();
        let (_, records) = plan_and_records();
        assert_eq!(r.runs.len(), 24);
        assert_eq!(r.pairs.len(), 12, "6 ordered pairs x 2 address kinds");
        let failed = r.failed();
        assert_eq!(failed.len(), 4, "two uncollected, two unreachable");
        assert!(failed.iter().any(|f| f.figures.error.as_deref().unwrap().starts_with("no result was collected")));
        let unreachable = failed.iter().find(|f| f.sender == "h2").unwrap();
        assert_eq!(
            unreachable.figures.error.as_deref(),
            Some("h2: unreachable: ssh: connect to host 10.0.0.2 port 22: Connection refused")
        );
        let p = r.pairs.iter().find(|p| p.sender == "h2" && p.receiver == "h1" && p.address == "internal").unwrap();
        assert_eq!((p.figures.runs, p.figures.complete_runs), (2, 2));
        let st = p.figures.receiver_bits_per_second.unwrap();
        assert_eq!((st.min, st.median, st.max), (21e9, 21.5e9, 22e9));
        assert_eq!(p.figures.verdicts, vec!["sender cpu"]);
        let lost = r.pairs.iter().find(|p| p.sender == "h3" && p.receiver == "h1" && p.address == "internal").unwrap();
        assert_eq!((lost.figures.complete_runs, lost.figures.receiver_bits_per_second), (0, None));
        // A run's figures are its document's, under the same keys in the merged document.
        let sent: StreamDocument = serde_json::from_value(records["0001"].document.clone().unwrap()).unwrap();
        let run = &r.runs[0];
        assert_eq!(run.figures.retransmits, Some(sent.tcp.sender.retransmitted_segments));
        let merged = serde_json::to_value(r.to_document()).unwrap();
        assert_eq!(merged["runs"][0]["retransmits"].as_u64(), Some(sent.tcp.sender.retransmitted_segments));
        assert_eq!(merged["runs"][0]["sender_bits_per_second"].as_f64(), Some(sent.sum.sender.bits_per_second));
        assert_eq!(p.figures.sender_bits_per_second.unwrap().median, 21.5e9, "the sender's rate over the pair");
    }

    #[test]
    fn summaries_by_attribute_and_address() {
        let r = report();
        let by_addr = &r.summaries[0];
        assert_eq!(by_addr.attribute, "address");
        let values: Vec<&str> = by_addr.groups.iter().map(|g| g.value.as_str()).collect();
        assert_eq!(values, ["external", "internal"]);
        assert_eq!(by_addr.groups[0].figures.receiver_bits_per_second.unwrap().max, 0.95e9);
        assert!(by_addr.by_address.is_empty());
        let by_vcpus = &r.summaries[1];
        let values: Vec<&str> = by_vcpus.groups.iter().map(|g| g.value.as_str()).collect();
        assert_eq!(values, ["1", "2", "unknown"], "numeric order, the run without a record last");
        assert_eq!(by_vcpus.groups[0].pairs, 4, "h1 sends to two hosts over two address kinds");
        let internal = &by_vcpus.by_address["internal"];
        assert_eq!(internal[0].figures.receiver_bits_per_second.unwrap().median, 11.5e9);
        let chart = r.attribute_chart("vcpus");
        assert_eq!(chart.categories, ["1", "2", "unknown"]);
        assert_eq!(chart.series.len(), 2, "one line per address kind");
        assert_eq!(r.summaries[2].groups[0].value, "lab-1cpu");
        let text = r.render_text();
        assert!(text.contains("fleet: 24 planned runs, 20 complete, 4 failed, 12 pairs"), "{text}");
        assert!(text.contains("by sender vcpus, internal address:"), "{text}");
        assert!(text.contains("failed runs (4 of 24):"), "{text}");
        assert!(text.contains("h2 -> h1"), "{text}");
    }

    #[test]
    fn a_tcp_total_mismatch_or_an_incomplete_test_fails_the_run() {
        let plan = json!({"kind": "fleet-plan", "schema_version": 1, "runs": [
            {"id": "1", "sender": "a", "receiver": "b", "address": "internal", "repeat": 1},
            {"id": "2", "sender": "a", "receiver": "b", "address": "internal", "repeat": 2}]});
        let mut incomplete = doc(5.0, 10, 10);
        incomplete["complete"] = json!(false);
        incomplete["error"] = json!("the receiver vanished");
        let records: BTreeMap<String, FleetRunRecord> = [
            ("1".to_string(), record(json!({"id": "1", "rc": 0, "document": doc(5.0, 100, 99)}))),
            ("2".to_string(), record(json!({"id": "2", "rc": 1, "document": incomplete}))),
        ]
        .into();
        let r = FleetReport::merge(&plan, &records, Some(&["entry".into()])).unwrap();
        assert_eq!(r.runs[0].exact, Some(false));
        assert_eq!(r.runs[0].figures.error.as_deref(), Some("sender wrote 100 bytes, receiver counted 99"));
        assert_eq!(r.runs[1].figures.error.as_deref(), Some("the receiver vanished"));
        assert!(r.render_text().contains("NO"));
    }

    #[test]
    fn a_peers_counts_are_compared_only_where_it_gave_them_from_the_same_start() {
        let runs: Vec<Value> = (1..=4)
            .map(|n| json!({"id": n.to_string(), "sender": "a", "receiver": "b", "address": "internal", "repeat": n}))
            .collect();
        let plan = json!({"kind": "fleet-plan", "schema_version": 1, "runs": runs});
        let peer_doc = |peer: &str, sent, counted, warmup_ms: u64, receiver: bool| {
            let mut d = doc(5.0, sent, counted);
            d["peer"] = json!(peer);
            d["test"]["warmup_ms"] = json!(warmup_ms);
            if !receiver {
                d["sum"]["receiver"] = Value::Null;
            }
            d
        };
        let records: BTreeMap<String, FleetRunRecord> = [
            peer_doc("iperf3", 100, 100, 0, true),
            peer_doc("iperf3", 100, 99, 0, true),
            peer_doc("iperf3", 100, 90, 1000, true),
            peer_doc("ntttcp", 100, 0, 0, false),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, d)| ((i + 1).to_string(), record(json!({"id": (i + 1).to_string(), "rc": 0, "document": d}))))
        .collect();
        let r = FleetReport::merge(&plan, &records, Some(&["peer".into()])).unwrap();
        let exact: Vec<Option<bool>> = r.runs.iter().map(|r| r.exact).collect();
        assert_eq!(exact, [Some(true), Some(false), None, None], "an omitted warm-up, no receiver side: not compared");
        let failed: Vec<bool> = r.runs.iter().map(FleetRun::failed).collect();
        assert_eq!(failed, [false, true, false, false]);
        assert_eq!(r.runs[3].attribute("peer").as_deref(), Some("ntttcp"));
        assert_eq!((r.runs[3].receiver_total_bytes, r.runs[0].figures.cpu_seconds_per_gb), (None, None));
    }

    #[test]
    fn entries_with_other_options_are_pairs_of_their_own() {
        let plan = json!({"kind": "fleet-plan", "schema_version": 1, "runs": [
            {"id": "1", "entry": "p16", "sender": "a", "receiver": "b", "address": "internal", "repeat": 1},
            {"id": "2", "entry": "p32", "sender": "a", "receiver": "b", "address": "internal", "repeat": 1}]});
        let records: BTreeMap<String, FleetRunRecord> = [
            ("1".to_string(), record(json!({"id": "1", "rc": 0, "document": doc(40.0, 7, 7)}))),
            ("2".to_string(), record(json!({"id": "2", "rc": 0, "document": doc(60.0, 9, 9)}))),
        ]
        .into();
        let r = FleetReport::merge(&plan, &records, Some(&["entry".into()])).unwrap();
        assert_eq!(r.pairs.len(), 2);
        assert_eq!(r.pairs[1].figures.receiver_bits_per_second.unwrap().median, 60e9);
        let text = r.render_text();
        assert!(text.starts_with("fleet: 2 planned runs") && text.contains("\nentry  pair"), "{text}");
        assert!(text.contains("p32    a -> b"), "{text}");
        assert_eq!(r.summaries[0].groups.len(), 2);
        let svg = heatmap::to_svg(&r);
        assert!(svg.contains(r#"id="heatmap-p16-internal""#) && svg.contains(r#"id="heatmap-p32-internal""#));
    }

    #[test]
    fn bad_inputs_are_usage_errors() {
        let (plan, records) = plan_and_records();
        let e = FleetReport::merge(&plan, &records, Some(&["vcpu".into()])).unwrap_err();
        assert!(e.message.contains("no host has the attribute 'vcpu'") && e.message.contains("vcpus"), "{e}");
        assert_eq!(e.exit_code(), 2);
        for (p, want) in [
            (json!({"kind": "sweep"}), "not a fleet plan"),
            (json!({"kind": "fleet-plan", "schema_version": 7, "runs": []}), "schema_version 7"),
            (json!({"kind": "fleet-plan", "schema_version": 1}), "no runs[]"),
            (json!({"kind": "fleet-plan", "schema_version": 1, "runs": [{"id": "1"}]}), "without 'sender'"),
        ] {
            let e = FleetReport::merge(&p, &BTreeMap::new(), None).unwrap_err();
            assert!(e.message.contains(want), "{want}: {e}");
        }
        let e = FleetReport::load(Path::new("/nonexistent-fleet-dir"), None).unwrap_err();
        // Without records no host reported its vCPUs: the default summaries skip them.
        let plan = json!({"kind": "fleet-plan", "schema_version": 1, "runs": [
            {"id": "1", "sender": "a", "receiver": "b", "address": "internal", "repeat": 1}]});
        let r = FleetReport::merge(&plan, &BTreeMap::new(), None).unwrap();
        assert_eq!(r.summaries.iter().map(|s| s.attribute.as_str()).collect::<Vec<_>>(), ["address"]);
        assert!(e.message.contains("no plan.json"), "{e}");
    }
}
