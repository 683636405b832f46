//! The documents the analysis layer writes: `compare` and `experiment` (an experiment's
//! document carries its comparison). Built from the results, serialized by the caller, read
//! back by `compare` (an experiment's runs become its variants).

use crate::analysis::compare::{CompareReport, Comparison, Metric, MetricSummary};
use crate::analysis::stats;
use crate::base::spec::TestSpec;
use crate::metrics::document::{Kind, RunRecord, Tool, SCHEMA_VERSION};
use crate::workload::experiment::ExperimentResult;
use serde::{Deserialize, Serialize};
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
