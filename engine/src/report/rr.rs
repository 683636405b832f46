//! How an rr or crr test is shown: text, and JSON with the latency keys of docs/output.md.

use crate::analysis::verdict::{diagnose, Verdict};
use crate::base::spec::TestSpec;
use crate::base::spec::Workload;
use crate::metrics::document::{
    ClientServer, Kind, MptcpSection, Tool, TransactionDocument, TransactionInterval, TransactionQueue,
    TransactionSide, TransactionSum, Transactions,
};
use crate::metrics::figures::{IntervalFigures, SideReport, SCHEMA_VERSION};
use crate::workload::rr::{workload_name, RrReport};
use serde_json::Value;

/// The first line of an rr or crr report: the agreed test.
pub fn rr_header(s: &TestSpec, target: &str) -> String {
    format!(
        "uringbench {}: {} to {}, {} queue{} x {} flow{}, {} B request / {} B response, {:.1} s window\n",
        env!("CARGO_PKG_VERSION"),
        workload_name(s),
        target,
        s.queues,
        if s.queues == 1 { "" } else { "s" },
        s.flows_per_queue,
        if s.flows_per_queue == 1 { "" } else { "s" },
        s.req_len,
        s.resp_len,
        s.time_ms as f64 / 1e3
    )
}

/// One client interval of an rr or crr test (`bytes` count transactions).
pub fn rr_interval_line(i: &IntervalFigures) -> String {
    format!(
        "[SUM] {:5.2}-{:<5.2} sec  {:>10} transactions  {:>12.0} trans/s\n",
        i.start,
        i.end,
        i.sum(),
        i.sum() as f64 / (i.end - i.start).max(1e-9)
    )
}

/// One entry of an rr report's `intervals[]`.
fn rr_interval(i: &IntervalFigures) -> TransactionInterval {
    TransactionInterval {
        start: i.start,
        end: i.end,
        transactions: i.sum(),
        transactions_per_second: i.sum() as f64 / (i.end - i.start).max(1e-9),
        cpu: i.cpu.clone(),
    }
}

/// [`rr_interval`] as JSON (a `--json-stream` interval event's keys).
pub fn rr_interval_json(i: &IntervalFigures) -> Value {
    serde_json::to_value(rr_interval(i)).unwrap_or(Value::Null)
}

impl RrReport {
    /// What most likely limited the run.
    pub fn verdict(&self) -> Verdict {
        diagnose(&self.evidence())
    }

    /// The document with the latency keys of docs/output.md: `latency_us` and
    /// `transactions_per_second`.
    pub fn to_document(&self) -> TransactionDocument {
        let server = self.server.as_ref();
        let counted = |s: &SideReport| Transactions { transactions: s.bytes(), total_transactions: s.total_bytes() };
        let queues = self
            .client
            .queues
            .iter()
            .map(|q| TransactionQueue {
                id: q.id,
                flows: q.flows,
                client: Transactions { transactions: q.bytes, total_transactions: q.total_bytes },
                server: server
                    .and_then(|s| s.queues.get(q.id as usize))
                    .map(|s| Transactions { transactions: s.bytes, total_transactions: s.total_bytes }),
            })
            .collect();
        let side = |s: &SideReport| TransactionSide {
            placement: s.placement.clone(),
            path: s.path.clone(),
            data_path: s.data_path.clone(),
            errors: s.errors.clone(),
        };
        TransactionDocument {
            kind: Some(if self.spec.workload == Workload::Crr { Kind::Crr } else { Kind::Rr }),
            schema_version: SCHEMA_VERSION,
            tool: Tool::this(),
            title: None,
            target: self.target.clone(),
            test: self.spec.clone(),
            complete: self.complete(),
            error: self.error.clone(),
            transactions_per_second: self.transactions_per_second(),
            latency_us: self.latency,
            failures: self.failures,
            failure_notes: self.failures.explain(self.spec.timeout()),
            queues,
            sum: TransactionSum {
                window_seconds: self.client.window_seconds,
                client: counted(&self.client),
                server: server.map(counted),
            },
            intervals: self.client.intervals.iter().map(rr_interval).collect(),
            cpu: ClientServer { client: self.client.cpu.clone(), server: server.map(|s| s.cpu.clone()) },
            client: side(&self.client),
            server: server.map(side),
            verdict: self.verdict(),
            mptcp: MptcpSection::of(self.spec.tuning.mptcp, &self.client, server),
            trip_times: self.trip_times.clone(),
        }
    }

    /// [`to_document`](Self::to_document) as a JSON value.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.to_document()).unwrap_or(Value::Null)
    }

    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = rr_header(&self.spec, &self.target);
        let _ = writeln!(out, "client: {} | {}", self.client.placement, self.client.path);
        if let Some(srv) = &self.server {
            let _ = writeln!(out, "server: {} | {}", srv.placement, srv.path);
        }
        for i in &self.client.intervals {
            out.push_str(&rr_interval_line(i));
        }
        out.push_str(&self.render_summary());
        out
    }

    /// The text that follows lines printed live (header, placement, intervals): each side's
    /// path, then the summary.
    pub fn render_after_live(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("client path: {}\n", self.client.path);
        if let Some(srv) = &self.server {
            let _ = writeln!(out, "server path: {}", srv.path);
        }
        out.push_str(&self.render_summary());
        out
    }

    /// Transactions, latency, failures, CPU, errors and the verdict.
    fn render_summary(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let l = &self.latency;
        let _ = writeln!(
            out,
            "transactions: {} in the window, {:.0}/s; total client {} / server {}",
            self.client.bytes(),
            self.transactions_per_second(),
            self.client.total_bytes(),
            self.server.as_ref().map_or("no report".into(), |s| s.total_bytes().to_string())
        );
        // With --bounceback a sample is a whole burst's round trip.
        let what = match self.spec.bounceback {
            Some(n) => format!("burst round trip ({n} requests)"),
            None => "latency".into(),
        };
        let _ = writeln!(
            out,
            "{what}: p50 {:.1} us  p90 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  max {:.1} us  (min {:.1}, mean {:.1}, {} samples)",
            l.p50, l.p90, l.p99, l.p999, l.max, l.min, l.mean, l.count
        );
        if let Some(t) = &self.trip_times {
            let _ = writeln!(out, "{}", t.line());
        }
        if self.failures.total() + self.failures.late > 0 {
            let f = &self.failures;
            let _ = writeln!(
                out,
                "failures: {} (timeouts {}, refused {}, port exhaustion {}, reset {}, other {}; late answers {})",
                f.total(),
                f.timeouts,
                f.refused,
                f.port_exhaustion,
                f.reset,
                f.other,
                f.late
            );
            for note in f.explain(self.spec.timeout()) {
                let _ = writeln!(out, "  {note}");
            }
        }
        for (name, side) in [("client", Some(&self.client)), ("server", self.server.as_ref())] {
            let Some(side) = side else { continue };
            let threads: Vec<String> =
                side.cpu.threads.iter().map(|t| format!("cpu{} {:.0}%", t.cpu, t.utilization * 100.0)).collect();
            let _ = writeln!(out, "cpu {name}: threads {}", threads.join(", "));
        }
        for err in self.error.iter().chain(&self.client.errors).chain(self.server.iter().flat_map(|s| &s.errors)) {
            let _ = writeln!(out, "error: {err}");
        }
        let v = self.verdict();
        let _ = writeln!(out, "verdict: {} ({})", v.bottleneck, v.evidence);
        out
    }
}
