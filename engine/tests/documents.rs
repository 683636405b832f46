//! The typed result model against documents written by the release before it (commit 53b0d44,
//! captured from real runs by fixtures/capture.sh): each loads as its typed document, and
//! written back it keeps every key with its value (a key that moved or changed meaning fails
//! here; new sibling keys are allowed, as docs/output.md promises).

use serde_json::Value;
use std::path::{Path, PathBuf};
use uringbench::metrics::document::{Kind, RunDocument, SCHEMA_VERSION};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/53b0d44")
}

fn load(name: &str) -> Value {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every key of `old`, at every depth, is in `new` with the same value; `where_` names the
/// path for the failure message.
fn keeps_every_key(old: &Value, new: &Value, where_: &str) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                let here = format!("{where_}/{k}");
                let nv = n.get(k).unwrap_or_else(|| panic!("{here}: missing in the document written back"));
                keeps_every_key(v, nv, &here);
            }
        }
        (Value::Array(o), Value::Array(n)) => {
            assert_eq!(o.len(), n.len(), "{where_}: array length");
            for (i, (ov, nv)) in o.iter().zip(n).enumerate() {
                keeps_every_key(ov, nv, &format!("{where_}/{i}"));
            }
        }
        (Value::Number(o), Value::Number(n)) => {
            assert_eq!(o.as_f64(), n.as_f64(), "{where_}: number");
        }
        _ => assert_eq!(old, new, "{where_}"),
    }
}

fn round_trip(name: &str) -> (RunDocument, Value) {
    let old = load(name);
    let typed = RunDocument::from_value(&old).unwrap_or_else(|e| panic!("{name}: {e}"));
    let new = match &typed {
        RunDocument::Stream(d) => serde_json::to_value(d),
        RunDocument::Transactions(d) => serde_json::to_value(d),
        RunDocument::Repeat(d) => serde_json::to_value(d),
    }
    .unwrap();
    keeps_every_key(&old, &new, name);
    (typed, new)
}

#[test]
fn stream_documents_of_the_previous_release_load_and_keep_their_keys() {
    for name in ["stream-tcp.json", "stream-udp.json", "stream-bidir.json", "stream-reverse.json"] {
        let (typed, new) = round_trip(name);
        let RunDocument::Stream(doc) = typed else { panic!("{name}: not read as a stream document") };
        assert_eq!(doc.kind, Kind::Stream, "{name}: a document without `kind` is a stream");
        assert_eq!(new["kind"], "stream", "{name}: written back with its kind");
        assert_eq!(doc.schema_version, SCHEMA_VERSION);
        assert!(doc.sum.receiver.is_some(), "{name}: the receiver's figures");
    }
    let (typed, _) = round_trip("stream-udp.json");
    let RunDocument::Stream(udp) = typed else { unreachable!() };
    let udp_sum = udp.sum.receiver.and_then(|r| r.udp).expect("a UDP document carries the datagram accounting");
    assert!(udp_sum.datagrams > 0 && udp_sum.expected >= udp_sum.datagrams);
    let (typed, _) = round_trip("stream-bidir.json");
    let RunDocument::Stream(bidir) = typed else { unreachable!() };
    assert!(bidir.reverse.is_some(), "--bidir holds the other direction");
}

#[test]
fn transaction_and_repeat_documents_of_the_previous_release_load_and_keep_their_keys() {
    for name in ["rr.json", "crr.json", "rr-udp.json"] {
        let (typed, _) = round_trip(name);
        let RunDocument::Transactions(doc) = typed else { panic!("{name}: not read as an rr document") };
        assert!(doc.latency_us.count > 0, "{name}: transactions were timed");
    }
    let (typed, new) = round_trip("repeat.json");
    let RunDocument::Repeat(doc) = typed else { panic!("repeat.json: not read as a repeat document") };
    assert_eq!(doc.runs.len(), 2);
    assert_eq!(new["kind"], "repeat");
}

#[test]
fn http_documents_of_the_previous_release_load_and_keep_their_keys() {
    use uringbench::workload::http::HttpDocument;
    let old = load("http.json");
    let doc: HttpDocument = serde_json::from_value(old.clone()).expect("an http document");
    assert_eq!(doc.kind, Kind::Http, "a document without `kind` from http is an http document");
    assert!(doc.report.requests > 0);
    keeps_every_key(&old, &serde_json::to_value(&doc).unwrap(), "http.json");
}

/// Loads a fixture as `T` and checks that written back it keeps every key and value.
fn typed_round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(name: &str) -> T {
    let old = load(name);
    let typed: T = serde_json::from_value(old.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    keeps_every_key(&old, &serde_json::to_value(&typed).unwrap(), name);
    typed
}

#[test]
fn tuning_and_fleet_documents_of_the_previous_release_load_and_keep_their_keys() {
    use uringbench::compare::CompareDocument;
    use uringbench::experiment::ExperimentDocument;
    use uringbench::fleet::FleetDocument;
    use uringbench::search::SearchDocument;
    use uringbench::sweep::SweepDocument;
    use uringbench::RunRecord;
    let sweep: SweepDocument = typed_round_trip("sweep.json");
    assert_eq!(sweep.kind, Kind::Sweep);
    assert!(sweep.points.iter().all(|p| !p.point.runs.is_empty()), "every point has its runs");
    let search: SearchDocument = typed_round_trip("search.json");
    assert_eq!(search.kind, Kind::Search);
    assert!(!search.result.steps.is_empty());
    let compare: CompareDocument = typed_round_trip("compare.json");
    assert_eq!(compare.kind, Kind::Compare);
    assert!(compare.variants.len() >= 2 && !compare.comparisons.is_empty());
    let experiment: ExperimentDocument = typed_round_trip("experiment.json");
    assert_eq!(experiment.kind, Kind::Experiment);
    assert!(experiment.compare.is_some(), "an experiment carries its comparison");
    for v in &experiment.variants {
        assert!(!v.runs.is_empty(), "{}: runs", v.name);
        assert!(v.runs.iter().all(|r| matches!(r, RunRecord::Stream(_))), "{}: stream runs read as such", v.name);
    }
    let fleet: FleetDocument = typed_round_trip("fleet.json");
    assert_eq!((fleet.kind, fleet.planned_runs, fleet.complete_runs), (Kind::Fleet, 2, 1));
    assert_eq!(fleet.failed_runs[0].id, "0002");
}

#[test]
fn doctor_documents_of_the_previous_release_load_and_keep_their_keys() {
    use uringbench::doctor::facts::Facts;
    use uringbench::DoctorDocument;
    let old = load("doctor.json");
    let doc: DoctorDocument = serde_json::from_value(old.clone()).expect("a doctor document");
    assert_eq!(doc.kind, Kind::Doctor, "a doctor document without `kind` is a doctor document");
    assert_eq!(doc.checks.len(), 24);
    let summary = doc.summary;
    assert_eq!(summary.pass + summary.warn + summary.fail + summary.skip, doc.checks.len());
    let mtu = doc.checks.iter().find(|c| c.id == "nic.mtu").expect("nic.mtu");
    assert!(matches!(&mtu.facts, Some(Facts::NicMtu(f)) if f.mtu == 1500), "{:?}", mtu.facts);
    let new = serde_json::to_value(&doc).unwrap();
    keeps_every_key(&old, &new, "doctor.json");
    assert_eq!(new["kind"], "doctor", "written back with its kind");
}

#[test]
fn a_document_of_another_schema_version_is_refused_by_name() {
    let mut doc = load("stream-tcp.json");
    doc["schema_version"] = Value::from(SCHEMA_VERSION + 1);
    let e = RunDocument::from_value(&doc).unwrap_err();
    assert!(e.contains("schema_version"), "{e}");
}

/// The JSON Schemas in docs/schema/, generated from the document types: a change to a type
/// that is not carried into the published schema fails here. Regenerate with
/// `URINGBENCH_WRITE_SCHEMA=1 cargo test -p uringbench-engine --test documents schemas`.
#[test]
fn schemas_in_docs_match_the_types() {
    use uringbench::metrics::document::{RepeatDocument, StreamDocument, TransactionDocument};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema");
    let schemas = [
        ("stream.schema.json", schemars::schema_for!(StreamDocument)),
        ("rr.schema.json", schemars::schema_for!(TransactionDocument)),
        ("repeat.schema.json", schemars::schema_for!(RepeatDocument)),
        ("http.schema.json", schemars::schema_for!(uringbench::workload::http::HttpDocument)),
        ("sweep.schema.json", schemars::schema_for!(uringbench::sweep::SweepDocument)),
        ("search.schema.json", schemars::schema_for!(uringbench::search::SearchDocument)),
        ("experiment.schema.json", schemars::schema_for!(uringbench::experiment::ExperimentDocument)),
        ("compare.schema.json", schemars::schema_for!(uringbench::compare::CompareDocument)),
        ("fleet.schema.json", schemars::schema_for!(uringbench::fleet::FleetDocument)),
        ("doctor.schema.json", schemars::schema_for!(uringbench::DoctorDocument)),
    ];
    let write = std::env::var_os("URINGBENCH_WRITE_SCHEMA").is_some();
    for (name, schema) in schemas {
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let published = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            published == text,
            "{} is not the schema of the types: regenerate it (URINGBENCH_WRITE_SCHEMA=1 cargo test -p uringbench-engine --test documents schemas) and say what changed in docs/output.md",
            path.display()
        );
    }
}

/// Every captured document validates against the published schema of its kind (the schema
/// describes what the release writes, not only what the types accept).
#[test]
fn captured_documents_validate_against_the_published_schemas() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema");
    for (doc, schema) in [
        ("stream-tcp.json", "stream.schema.json"),
        ("stream-udp.json", "stream.schema.json"),
        ("stream-bidir.json", "stream.schema.json"),
        ("rr.json", "rr.schema.json"),
        ("crr.json", "rr.schema.json"),
        ("repeat.json", "repeat.schema.json"),
        ("http.json", "http.schema.json"),
        ("sweep.json", "sweep.schema.json"),
        ("search.json", "search.schema.json"),
        ("experiment.json", "experiment.schema.json"),
        ("compare.json", "compare.schema.json"),
        ("fleet.json", "fleet.schema.json"),
        ("doctor.json", "doctor.schema.json"),
    ] {
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(schema)).unwrap()).unwrap();
        let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
        let instance = load(doc);
        let errors: Vec<String> =
            validator.iter_errors(&instance).map(|e| format!("{}: {e}", e.instance_path)).collect();
        assert!(errors.is_empty(), "{doc} against {schema}: {errors:#?}");
    }
}
