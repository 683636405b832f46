//! The documents the analysis layer writes, `compare` and `experiment` (an experiment's
//! document carries its comparison), and the reading of saved documents of every kind into the
//! variants `compare` compares.

use crate::analysis::compare::{figures_of_value, CompareReport, Comparison, Metric, MetricSummary, Variant};
use crate::analysis::stats;
use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::metrics::document::{read_document, FleetRunRecord, Kind, RunDocument, RunRecord, Tool, SCHEMA_VERSION};
use crate::metrics::run_figures::RunFigures;
use crate::workload::experiment::ExperimentResult;
use crate::workload::sweep::SweepResult;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `compare -J`: per variant its statistics, per variant against the first the comparisons.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CompareDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: Tool,
    /// The bootstrap's seed: the same runs and seed give the same document.
    pub seed: u64,
    pub bootstrap_rounds: usize,
    /// The significance level of every test.
    pub alpha: f64,
    /// The metric the verdict lines are on.
    pub primary_metric: Metric,
    pub metrics: Vec<Metric>,
    pub variants: Vec<CompareVariant>,
    pub comparisons: Vec<Comparison>,
}

/// One variant of a comparison.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CompareVariant {
    pub name: String,
    /// The files its runs came from.
    pub sources: Vec<String>,
    pub runs: usize,
    pub complete_runs: usize,
    /// Per metric key; null where the variant's runs lack that figure.
    pub metrics: BTreeMap<String, Option<MetricSummary>>,
}

impl CompareReport {
    pub fn to_document(&self) -> CompareDocument {
        let variants = self
            .variants
            .iter()
            .zip(&self.summaries)
            .map(|(v, summaries)| CompareVariant {
                name: v.name.clone(),
                sources: v.sources.clone(),
                runs: v.runs.len(),
                complete_runs: v.complete_runs().count(),
                metrics: self.metrics.iter().map(|m| m.key().to_owned()).zip(summaries.iter().cloned()).collect(),
            })
            .collect();
        CompareDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Compare,
            tool: Tool::this(),
            seed: self.seed,
            bootstrap_rounds: stats::BOOTSTRAP_ROUNDS,
            alpha: stats::ALPHA,
            primary_metric: self.primary,
            metrics: self.metrics.clone(),
            variants,
            comparisons: self.comparisons.clone(),
        }
    }
}

/// `experiment -J`: every run, the exact settings, the block orders and the comparison.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExperimentDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: Tool,
    pub target: String,
    pub test: TestSpec,
    /// The seed of the block orders (and of the comparison's bootstrap).
    pub seed: u64,
    pub warmup_runs: u32,
    /// Per block, the variants in the order they ran.
    pub block_orders: Vec<Vec<String>>,
    pub variants: Vec<ExperimentVariant>,
    /// The comparison of the variants (`compare` re-reads it from the runs).
    pub compare: Option<CompareDocument>,
}

/// One variant of an experiment: its settings as planned and as applied, and its runs.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExperimentVariant {
    pub name: String,
    /// The receiver-side variant it asked for.
    pub receiver_variant: Option<String>,
    pub settings: Vec<String>,
    /// What the first application did, with the previous values.
    pub applied: Vec<String>,
    pub runs: Vec<RunRecord>,
}

/// The saved document of an experiment and its comparison.
pub fn experiment_document(result: &ExperimentResult, comparison: Option<&CompareReport>) -> ExperimentDocument {
    ExperimentDocument {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Experiment,
        tool: Tool::this(),
        target: result.target.clone(),
        test: result.test.clone(),
        seed: result.seed,
        warmup_runs: result.warmup_runs,
        block_orders: result.orders.clone(),
        variants: result
            .variants
            .iter()
            .map(|v| ExperimentVariant {
                name: v.name.clone(),
                receiver_variant: v.receiver.clone(),
                settings: v.settings.clone(),
                applied: v.applied.clone(),
                runs: v.runs.clone(),
            })
            .collect(),
        compare: comparison.map(CompareReport::to_document),
    }
}

/// The run of a fleet record, if its document reads.
fn fleet_run(record: &FleetRunRecord) -> Option<RunFigures> {
    record.stream_document().and_then(|d| d.ok()).map(|d| RunFigures::of_stream(&d))
}

/// The variants in one saved document. `name` names a single-variant document (a sweep or an
/// experiment names its own variants).
pub(crate) fn variants_of_doc(name: &str, source: &str, doc: &Value) -> Result<Vec<Variant>> {
    let variant = |name: String, runs: Vec<RunFigures>| Variant { name, sources: vec![source.to_owned()], runs };
    let malformed = |e: serde_json::Error| Error::usage(format!("malformed {} document: {e}", doc["kind"]));
    match doc.get("kind").and_then(Value::as_str) {
        Some("sweep") => {
            let sweep = SweepResult::from_json(doc)?;
            return Ok(sweep
                .points
                .iter()
                .map(|p| {
                    variant(
                        format!("{}={}", sweep.parameter.key(), p.label),
                        p.runs.iter().map(|r| r.figures.clone()).collect(),
                    )
                })
                .collect());
        }
        Some("fleet-run") => {
            let record = FleetRunRecord::deserialize(doc).map_err(malformed)?;
            let run = fleet_run(&record).ok_or_else(|| {
                Error::usage(format!(
                    "fleet run {} failed: {}",
                    record.id,
                    record.error.as_deref().unwrap_or("no report")
                ))
            })?;
            return Ok(vec![variant(name.to_owned(), vec![run])]);
        }
        Some("experiment") => {
            let exp: ExperimentDocument = read_document(doc, Kind::Experiment).map_err(Error::usage)?;
            if exp.variants.is_empty() {
                return Err(Error::usage("experiment document without variants"));
            }
            return Ok(exp
                .variants
                .iter()
                .map(|v| variant(v.name.clone(), v.runs.iter().map(RunFigures::of_record).collect()))
                .collect());
        }
        _ => {}
    }
    if doc.get("repeat").is_some() && doc.get("runs").is_some() {
        let runs = match RunDocument::from_value(doc) {
            Ok(RunDocument::Repeat(r)) if !r.runs.is_empty() => r.runs,
            _ => return Err(Error::usage("a --repeat document whose runs are not test reports")),
        };
        return Ok(vec![variant(name.to_owned(), runs.iter().map(RunFigures::of_stream).collect())]);
    }
    match figures_of_value(doc) {
        Ok(run) => Ok(vec![variant(name.to_owned(), vec![run])]),
        Err(_) => {
            Err(Error::usage("not a uringbench send, send --repeat, rr, crr, http, sweep or experiment JSON document"))
        }
    }
}

/// A command-line operand: `[NAME=]FILE[,FILE...]`. Several files make one variant; the name
/// defaults to the first file's name without `.json`.
pub fn load_operand(operand: &str) -> Result<Vec<Variant>> {
    let (name, files) = match operand.split_once('=') {
        Some((n, f)) if !n.is_empty() && !n.contains('/') && !n.contains(',') => (Some(n.to_owned()), f),
        _ => (None, operand),
    };
    let files: Vec<&str> = files.split(',').filter(|f| !f.is_empty()).collect();
    if files.is_empty() {
        return Err(Error::usage(format!("'{operand}': no file")));
    }
    let name = name.unwrap_or_else(|| {
        let base = files[0].rsplit('/').next().unwrap_or(files[0]);
        base.strip_suffix(".json").unwrap_or(base).to_owned()
    });
    // A fleet folder (what the Ansible run role collects) stands for its completed runs.
    let mut expanded: Vec<String> = Vec::new();
    for file in &files {
        let runs = std::path::Path::new(file).join("runs");
        if !runs.is_dir() {
            expanded.push((*file).to_owned());
            continue;
        }
        let mut records: Vec<String> = std::fs::read_dir(&runs)
            .map_err(|e| Error::usage(format!("{}: {e}", runs.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| p.display().to_string())
            .collect();
        records.sort();
        let complete: Vec<String> = records
            .into_iter()
            .filter(|r| {
                let record =
                    std::fs::read_to_string(r).ok().and_then(|t| serde_json::from_str::<FleetRunRecord>(&t).ok());
                record.is_some_and(|rec| fleet_run(&rec).is_some())
            })
            .collect();
        if complete.is_empty() {
            return Err(Error::usage(format!("{file}: a fleet folder without completed runs")));
        }
        expanded.extend(complete);
    }
    let files: Vec<&str> =
        if expanded.len() == files.len() { files } else { expanded.iter().map(String::as_str).collect() };
    let mut merged: Option<Variant> = None;
    let mut out = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| Error::usage(format!("{file}: {e}")))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| Error::usage(format!("{file}: not JSON: {e}")))?;
        let vs = variants_of_doc(&name, file, &doc).map_err(|e| Error::usage(format!("{file}: {}", e.message)))?;
        if files.len() == 1 {
            return Ok(vs);
        }
        if vs.len() != 1 {
            return Err(Error::usage(format!("{file}: holds several variants; give it on its own")));
        }
        let v = vs.into_iter().next().expect("one variant");
        match merged.as_mut() {
            None => merged = Some(v),
            Some(m) => {
                m.sources.extend(v.sources);
                m.runs.extend(v.runs);
            }
        }
    }
    out.extend(merged);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::compare::tests::stream_doc;
    use crate::analysis::compare::{compare, tests::variant};

    #[test]
    fn a_fleet_folder_is_one_variant_of_its_completed_runs() {
        let dir = std::env::temp_dir().join(format!("uringbench-compare-fleet-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("runs")).unwrap();
        let run = stream_doc(5.0);
        for (id, doc) in [("a", Some(run.clone())), ("b", Some(run)), ("c", None)] {
            let rec = fleet_record(id, doc, None);
            std::fs::write(dir.join("runs").join(format!("{id}.json")), serde_json::to_string(&rec).unwrap()).unwrap();
        }
        let operand = format!("before={}", dir.display());
        let vs = load_operand(&operand).unwrap();
        assert_eq!((vs.len(), vs[0].name.as_str(), vs[0].runs.len()), (1, "before", 2), "the failed run is left out");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fleet run's record as the Ansible run role writes it.
    fn fleet_record(id: &str, document: Option<Value>, error: Option<&str>) -> FleetRunRecord {
        FleetRunRecord {
            kind: "fleet-run".into(),
            id: id.into(),
            rc: Some(i64::from(error.is_some())),
            error: error.map(str::to_owned),
            document,
            ..FleetRunRecord::default()
        }
    }

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/53b0d44/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn documents_of_each_kind_give_variants() {
        let run = stream_doc(5.0);
        let repeat = fixture("repeat.json");
        assert_eq!(variants_of_doc("r", "f", &repeat).unwrap()[0].runs.len(), repeat["runs"].as_array().unwrap().len());
        let mut rr = fixture("rr.json");
        rr["transactions_per_second"] = 1e5.into();
        rr["complete"] = true.into();
        let v = &variants_of_doc("rr", "f", &rr).unwrap()[0];
        assert_eq!((v.samples(Metric::TransactionsPerSecond), v.samples(Metric::ReceivedGbps)), (vec![1e5], vec![]));
        let names: Vec<String> =
            variants_of_doc("e", "f", &fixture("experiment.json")).unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["plain", "tbf"]);
        let not_ours: Value = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert!(variants_of_doc("n", "f", &not_ours).unwrap_err().message.contains("not a uringbench"));
        let fleet_run = serde_json::to_value(fleet_record("r1", Some(run.clone()), None)).unwrap();
        assert_eq!(variants_of_doc("f", "f", &fleet_run).unwrap()[0].runs.len(), 1);
        let failed = serde_json::to_value(fleet_record("r2", None, Some("host4 unreachable"))).unwrap();
        assert!(variants_of_doc("f", "f", &failed).unwrap_err().message.contains("host4 unreachable"));
        assert!(compare(vec![variant("a", &[1.0])], None, 1).unwrap_err().message.contains("two variants"));
        let rrv = variants_of_doc("rr", "f", &rr).unwrap().remove(0);
        let e = compare(vec![variant("a", &[1.0]), rrv], None, 1).unwrap_err();
        assert!(e.message.contains("share no metric"), "{e}");
        assert!(Metric::parse("gbps").unwrap_err().message.contains("received_gbps"));
    }
}
