//! Reading a fleet run's results: the plan's runs, each run's record file, and the row each
//! becomes (a record missing or failed is a row that says so).

use super::*;

/// `plan.json` as the Ansible run role writes it before the first run. Every field is
/// optional here so that a wrong file is named by what it lacks.
#[derive(Debug, Deserialize)]
pub(super) struct FleetPlan {
    pub(super) kind: Option<String>,
    pub(super) schema_version: Option<u64>,
    pub(super) runs: Option<Vec<PlannedRun>>,
}

/// One planned run of `plan.json`.
#[derive(Debug, Deserialize)]
pub(super) struct PlannedRun {
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) entry: Option<String>,
    pub(super) sender: Option<String>,
    pub(super) receiver: Option<String>,
    pub(super) address: Option<String>,
    #[serde(default)]
    pub(super) repeat: Option<u64>,
}

/// `report --fleet -J`: every run with its figures and facts, the pairs, the summaries.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FleetDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: Tool,
    pub planned_runs: usize,
    pub complete_runs: usize,
    pub failed_runs: Vec<FailedFleetRun>,
    pub pairs: Vec<PairSummary>,
    pub summaries: Vec<AttributeSummary>,
    pub runs: Vec<FleetRun>,
}

/// A failed run as the merged document lists it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailedFleetRun {
    pub id: String,
    pub sender: String,
    pub receiver: String,
    pub address: String,
    pub repeat: u64,
    pub error: Option<String>,
}

/// The planned runs of `plan.json`, its envelope checked.
#[cfg(test)]
pub(super) fn planned_runs(plan: &Value) -> Result<Vec<PlannedRun>> {
    let plan = FleetPlan::deserialize(plan).map_err(|e| Error::usage(format!("plan.json: {e}")))?;
    checked_plan(plan)
}

/// `plan.json`'s planned runs, parsed from the file as it is read (a million runs' plan is
/// never held as text or as a JSON tree), its envelope checked.
pub(super) fn read_plan(path: &Path) -> Result<Vec<PlannedRun>> {
    let file = std::fs::File::open(path).map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
    let plan: FleetPlan = serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => Error::usage(format!("plan.json: {e}")),
        _ => Error::usage(format!("{}: not JSON: {e}", path.display())),
    })?;
    checked_plan(plan)
}

fn checked_plan(plan: FleetPlan) -> Result<Vec<PlannedRun>> {
    if plan.kind.as_deref() != Some("fleet-plan") {
        return Err(Error::usage("plan.json is not a fleet plan (kind \"fleet-plan\")"));
    }
    if plan.schema_version != Some(u64::from(SCHEMA_VERSION)) {
        let version = plan.schema_version.map_or("missing".into(), |v| v.to_string());
        return Err(Error::usage(format!("fleet plan schema_version {version} is not supported")));
    }
    plan.runs.ok_or_else(|| Error::usage("plan.json has no runs[]"))
}

/// A run id names its record file only when it is letters, digits, `-` or `_` (no path).
pub(super) fn is_record_name(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Each host's facts once: a run's facts share the value already held for its host when
/// they are the same (they differ only if the host changed between runs).
#[derive(Default)]
pub(super) struct HostFacts(std::collections::HashMap<String, Facts>);

impl HostFacts {
    pub(super) fn share(&mut self, host: &str, facts: Map<String, Value>) -> Facts {
        match self.0.get(host) {
            Some(held) if **held == facts => Arc::clone(held),
            _ => {
                let facts = Arc::new(facts);
                self.0.insert(host.to_owned(), Arc::clone(&facts));
                facts
            }
        }
    }
}

/// A run's record, None when the run role wrote none.
pub(super) fn read_record(p: &Path) -> Result<Option<FleetRunRecord>> {
    let text = match std::fs::read_to_string(p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::usage(format!("{}: {e}", p.display()))),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::usage(format!("{}: not a fleet run record: {e}", p.display())))
}

/// One planned run and its record, if the run role wrote one.
pub(super) fn run_of(
    planned: &PlannedRun,
    mut record: Option<FleetRunRecord>,
    facts: &mut HostFacts,
) -> Result<FleetRun> {
    let id = planned.id.clone().ok_or_else(|| Error::usage("a planned run without 'id'"))?;
    let field = |v: &Option<String>, key: &str| -> Result<String> {
        v.clone().ok_or_else(|| Error::usage(format!("a planned run without '{key}' (id {id})")))
    };
    let sender = field(&planned.sender, "sender")?;
    let receiver = field(&planned.receiver, "receiver")?;
    let (sender_facts, receiver_facts) = match record.as_mut() {
        Some(r) => (
            facts.share(&sender, std::mem::take(&mut r.sender_facts)),
            facts.share(&receiver, std::mem::take(&mut r.receiver_facts)),
        ),
        None => Default::default(),
    };
    let record = record.as_ref();
    let mut run = FleetRun {
        entry: planned.entry.clone().unwrap_or_default(),
        address: field(&planned.address, "address")?,
        sender,
        receiver,
        id,
        target: record.and_then(|r| r.target.clone()),
        repeat: planned.repeat.unwrap_or(1),
        peer: None,
        figures: RunFigures::default(),
        exact: None,
        sender_total_bytes: None,
        receiver_total_bytes: None,
        sender_facts,
        receiver_facts,
    };
    let Some(rec) = record else {
        run.figures = RunFigures::failed("no result was collected (the run did not start or its record was lost)");
        return Ok(run);
    };
    let doc = match rec.stream_document() {
        Some(Ok(doc)) => doc,
        Some(Err(e)) => {
            run.figures = RunFigures::failed(format!("the send -J document does not read: {e}"));
            return Ok(run);
        }
        None => {
            run.figures =
                RunFigures::failed(record_error(rec).unwrap_or_else(|| "no send -J document came back".into()));
            return Ok(run);
        }
    };
    run.figures = RunFigures::of_stream(&doc);
    if doc.peer.is_some() {
        // Another tool's receiving host is not sampled by us: no CPU per byte there.
        run.figures.cpu_seconds_per_gb = None;
    }
    run.sender_total_bytes = Some(doc.sum.sender.total_bytes);
    run.receiver_total_bytes = doc.sum.receiver.as_ref().map(|r| r.total_bytes);
    run.peer = doc.peer.clone();
    // Another tool's counts compare only when it sent them and counted from the same start.
    let comparable = doc.peer.is_none() || (doc.sum.receiver.is_some() && doc.test.warmup_ms == 0);
    if doc.test.proto == Proto::Tcp && comparable {
        run.exact = match (run.sender_total_bytes, run.receiver_total_bytes) {
            (Some(s), Some(r)) => Some(s == r),
            _ => Some(false),
        };
    }
    // The run fails for its own error, and also for a byte count the two ends disagree on or
    // a non-zero exit of `send`.
    run.figures.error = if !run.figures.complete {
        Some(doc.error.clone().unwrap_or_else(|| "the test did not complete".into()))
    } else if run.exact == Some(false) {
        Some(format!(
            "sender wrote {} bytes, receiver counted {}",
            run.sender_total_bytes.map_or("?".into(), |b| b.to_string()),
            run.receiver_total_bytes.map_or("?".into(), |b| b.to_string())
        ))
    } else if rec.rc != Some(0) {
        Some(
            record_error(rec)
                .unwrap_or_else(|| format!("send exited with {}", rec.rc.map_or("?".into(), |c| c.to_string()))),
        )
    } else {
        None
    };
    Ok(run)
}

/// The record's own error (unreachable host, timeout, stderr of `send`), on one line.
pub(super) fn record_error(rec: &FleetRunRecord) -> Option<String> {
    let e = rec.error.as_deref().map(str::trim).filter(|e| !e.is_empty())?;
    Some(e.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | "))
}
