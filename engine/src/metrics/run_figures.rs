//! One run's headline figures, read from whatever document the run left (a stream, an rr or
//! crr test; an http run's document reads itself, beside its type), or the failure of a run
//! that left none; and the summary over several runs that `send --repeat`, a sweep's points and
//! the fleet report's pairs and groups print. Every reader of runs (sweep, search, compare,
//! the fleet merge, `report`) takes its figures from here, so a figure means one thing
//! everywhere.

use crate::base::spec::Proto;
use crate::metrics::document::{RunRecord, StreamDocument, TransactionDocument};
use crate::metrics::summary::{RunsSummary, Stats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The figures of one run. Every figure is optional: a run has those of its kind (a stream
/// its bit rates, CPU per byte, retransmits over TCP, loss over UDP; rr, crr and http their
/// transactions and p99), and a failed run none. Saved in a sweep's runs and a fleet's runs;
/// the figures after `verdict` are written only where the run has them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunFigures {
    /// The run completed (both ends reported, nothing failed).
    pub complete: bool,
    /// The headline (`sum.receiver.bits_per_second`); None when no receiver report came back.
    pub receiver_bits_per_second: Option<f64>,
    /// What the sender offered (`sum.sender.bits_per_second`).
    pub sender_bits_per_second: Option<f64>,
    /// Receiver host CPU-seconds per GB received.
    pub cpu_seconds_per_gb: Option<f64>,
    /// The verdict's bottleneck name.
    pub verdict: Option<String>,
    /// Why the run is incomplete or failed.
    pub error: Option<String>,
    /// TCP streams: segments the sender retransmitted (`tcp.sender.retransmitted_segments`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// TCP streams: bytes retransmitted ÷ bytes sent, over the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmit_ratio: Option<f64>,
    /// UDP streams: datagrams lost ÷ expected over the whole run (`sum.receiver.loss_ratio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<f64>,
    /// rr, crr and http: transactions per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_second: Option<f64>,
    /// rr, crr and http: the 99th percentile transaction latency, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// `--latency`: the probe's loaded p99 round trip (ms), when it was answered under load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_p99_ms: Option<f64>,
    /// `--latency`: round trips per minute under load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<f64>,
}

impl RunFigures {
    /// A run that left no report: incomplete, with why.
    pub fn failed(error: impl Into<String>) -> Self {
        Self { complete: false, error: Some(error.into()), ..Self::default() }
    }

    /// A stream run (`send -J`, also against iperf2, iperf3 or NTttcp).
    pub fn of_stream(doc: &StreamDocument) -> Self {
        let received = doc.sum.receiver.as_ref();
        let loaded = doc.latency.as_ref().filter(|l| l.loaded.count > 0);
        let tcp = (doc.test.proto == Proto::Tcp).then_some(&doc.tcp.sender);
        Self {
            complete: doc.complete,
            receiver_bits_per_second: received.map(|r| r.bits_per_second),
            sender_bits_per_second: Some(doc.sum.sender.bits_per_second),
            cpu_seconds_per_gb: doc.cpu.receiver_per_byte.map(|c| c.cpu_seconds_per_gb),
            verdict: Some(doc.verdict.bottleneck.name().to_owned()),
            error: doc.error.clone(),
            retransmits: tcp.map(|t| t.retransmitted_segments),
            retransmit_ratio: tcp.filter(|t| t.bytes_sent > 0).map(|t| t.bytes_retrans as f64 / t.bytes_sent as f64),
            loss_ratio: received.and_then(|r| r.udp.as_ref()).map(|u| u.loss_ratio),
            loaded_p99_ms: loaded.map(|l| l.loaded.p99_ms),
            rpm: loaded.map(|l| l.rpm),
            ..Self::default()
        }
    }

    /// An rr or crr run (`rr -J`, `crr -J`).
    pub fn of_transactions(doc: &TransactionDocument) -> Self {
        Self {
            complete: doc.complete,
            verdict: Some(doc.verdict.bottleneck.name().to_owned()),
            error: doc.error.clone(),
            transactions_per_second: Some(doc.transactions_per_second),
            p99_us: Some(doc.latency_us.p99),
            ..Self::default()
        }
    }

    /// One run as a series keeps it (an experiment's variants): its document, or why none.
    pub fn of_record(record: &RunRecord) -> Self {
        match record {
            RunRecord::Failed(f) => Self::failed(f.error.clone()),
            RunRecord::Stream(d) => Self::of_stream(d),
            RunRecord::Transactions(d) => Self::of_transactions(d),
        }
    }

    /// The run counts in a summary: it completed and nothing made it fail.
    pub fn succeeded(&self) -> bool {
        self.complete && self.error.is_none()
    }

    /// The loss a rate search judges: UDP's datagram loss, TCP's retransmitted share.
    pub fn loss_or_retransmit_ratio(&self) -> Option<f64> {
        self.loss_ratio.or(self.retransmit_ratio)
    }
}

impl RunsSummary {
    /// The summary of `runs`: those that succeeded enter the statistics (non-finite values
    /// left out) and the verdict count.
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a RunFigures>) -> Self {
        let runs: Vec<&RunFigures> = runs.into_iter().collect();
        let ok: Vec<&RunFigures> = runs.iter().copied().filter(|r| r.succeeded()).collect();
        let stats = |f: fn(&RunFigures) -> Option<f64>| {
            Stats::of(&ok.iter().filter_map(|r| f(r)).filter(|v| v.is_finite()).collect::<Vec<_>>())
        };
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for v in ok.iter().filter_map(|r| r.verdict.as_deref()) {
            *counts.entry(v).or_default() += 1;
        }
        let mut verdicts: Vec<(&str, usize)> = counts.into_iter().collect();
        verdicts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        Self {
            runs: runs.len(),
            complete_runs: ok.len(),
            receiver_bits_per_second: stats(|r| r.receiver_bits_per_second),
            sender_bits_per_second: stats(|r| r.sender_bits_per_second),
            cpu_seconds_per_gb: stats(|r| r.cpu_seconds_per_gb),
            retransmits: stats(|r| r.retransmits.map(|n| n as f64)),
            loss_ratio: stats(|r| r.loss_ratio),
            transactions_per_second: stats(|r| r.transactions_per_second),
            p99_us: stats(|r| r.p99_us),
            loaded_p99_ms: stats(|r| r.loaded_p99_ms),
            rpm: stats(|r| r.rpm),
            verdicts: verdicts.into_iter().map(|(v, _)| v.to_owned()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/53b0d44/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn a_tcp_stream_documents_figures_are_its_own_keys() {
        let raw = fixture("stream-tcp.json");
        let f = RunFigures::of_stream(&serde_json::from_value(raw.clone()).unwrap());
        assert_eq!(f.receiver_bits_per_second, raw["sum"]["receiver"]["bits_per_second"].as_f64());
        assert_eq!(f.sender_bits_per_second, raw["sum"]["sender"]["bits_per_second"].as_f64());
        assert_eq!(f.cpu_seconds_per_gb, raw["cpu"]["receiver_per_byte"]["cpu_seconds_per_gb"].as_f64());
        assert_eq!(f.verdict.as_deref(), raw["verdict"]["bottleneck"].as_str());
        assert_eq!(f.complete, raw["complete"] == true);
        assert_eq!(f.retransmits, raw["tcp"]["sender"]["retransmitted_segments"].as_u64());
        let (retrans, sent) =
            (raw["tcp"]["sender"]["bytes_retrans"].as_f64().unwrap(), raw["tcp"]["sender"]["bytes_sent"].as_f64());
        assert_eq!(f.retransmit_ratio, sent.filter(|&s| s > 0.0).map(|s| retrans / s));
        assert_eq!((f.loss_ratio, f.transactions_per_second), (None, None), "TCP: no datagram loss, no transactions");
    }

    #[test]
    fn udp_and_transaction_documents_give_their_own_figures() {
        let raw = fixture("stream-udp.json");
        let f = RunFigures::of_stream(&serde_json::from_value(raw.clone()).unwrap());
        assert_eq!(f.loss_ratio, raw["sum"]["receiver"]["loss_ratio"].as_f64());
        assert_eq!((f.retransmits, f.retransmit_ratio), (None, None), "UDP: no retransmits");
        assert_eq!(f.loss_or_retransmit_ratio(), f.loss_ratio);
        let raw = fixture("rr.json");
        let f = RunFigures::of_transactions(&serde_json::from_value(raw.clone()).unwrap());
        assert_eq!(f.transactions_per_second, raw["transactions_per_second"].as_f64());
        assert_eq!(f.p99_us, raw["latency_us"]["p99"].as_f64());
        assert_eq!(f.receiver_bits_per_second, None);
        let failed = RunFigures::of_record(&RunRecord::failed("refused"));
        assert!(!failed.complete && !failed.succeeded() && failed.error.as_deref() == Some("refused"));
    }

    fn run(gbps: f64, verdict: &str) -> RunFigures {
        RunFigures {
            complete: true,
            receiver_bits_per_second: Some(gbps * 1e9),
            sender_bits_per_second: Some(gbps * 1e9),
            verdict: Some(verdict.into()),
            ..RunFigures::default()
        }
    }

    #[test]
    fn a_summary_counts_the_runs_that_succeeded_and_their_verdicts_by_frequency() {
        let mut mismatched = run(99.0, "sender cpu");
        mismatched.error = Some("sender wrote 100 bytes, receiver counted 99".into());
        let runs = [
            run(10.0, "receive window"),
            run(12.0, "sender cpu"),
            RunFigures::failed("the receiver vanished"),
            run(11.0, "sender cpu"),
            mismatched,
        ];
        let s = RunsSummary::of(&runs);
        assert_eq!((s.runs, s.complete_runs), (5, 3), "a failed run and one with an error are left out");
        let st = s.receiver_bits_per_second.unwrap();
        assert_eq!((st.min, st.median, st.max), (10e9, 11e9, 12e9));
        assert_eq!(s.verdicts, ["sender cpu", "receive window"]);
        assert_eq!((s.cpu_seconds_per_gb, s.transactions_per_second), (None, None));
        let none = RunsSummary::of(&[RunFigures::failed("x")]);
        assert_eq!((none.complete_runs, none.receiver_bits_per_second, none.verdicts.len()), (0, None, 0));
    }
}
