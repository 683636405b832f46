//! How an rr or crr test is shown: text, and JSON with the latency keys of docs/output.md.

use crate::analysis::verdict::{diagnose, Verdict};
use crate::base::spec::TestSpec;
use crate::base::spec::Workload;
use crate::metrics::document::{
    ClientServer, Kind, MptcpSection, Tool, TransactionDocument, TransactionInterval, TransactionQueue,
    TransactionSide, TransactionSum, Transactions,
};
use crate::metrics::figures::{IntervalFigures, SideReport, SCHEMA_VERSION};
use crate::metrics::latency::LatencyInterval;
use crate::report::stream::{shown_span, Detail};
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

/// The titles of rr and crr interval lines.
pub fn rr_interval_titles() -> String {
    format!(
        "{:<23}{:>12}  {:>12}  {:>10}  {:>10}\n",
        "[ ID] Interval", "Transactions", "Trans/s", "p50 (us)", "p99 (us)"
    )
}

/// Client interval `n` of an rr or crr test (`bytes` count transactions), with the round
/// trips' p50 and p99 over it when known.
pub fn rr_interval_line(s: &TestSpec, n: usize, i: &IntervalFigures, latency: Option<&LatencyInterval>) -> String {
    let (from, to) = shown_span(s, n, i);
    let us = |ms: f64| latency.filter(|l| l.rtt.count > 0).map_or("-".to_string(), |_| format!("{:.1}", ms * 1e3));
    format!(
        "[SUM] {from:5.2}-{to:<5.2} sec  {:>12}  {:>12.0}  {:>10}  {:>10}\n",
        i.sum(),
        i.sum() as f64 / (i.end - i.start).max(1e-9),
        us(latency.map_or(0.0, |l| l.rtt.p50_ms)),
        us(latency.map_or(0.0, |l| l.rtt.p99_ms)),
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
        round_trips: None,
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
            intervals: (0..)
                .zip(&self.client.intervals)
                .map(|(n, i)| TransactionInterval {
                    round_trips: self.interval_latency.get(n).map(|l| l.rtt),
                    ..rr_interval(i)
                })
                .collect(),
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

    /// The whole text with every detail (a saved run).
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = rr_header(&self.spec, &self.target);
        let _ = writeln!(out, "client: {} | {}", self.client.placement, self.client.path);
        if let Some(srv) = &self.server {
            let _ = writeln!(out, "server: {} | {}", srv.placement, srv.path);
        }
        if !self.client.intervals.is_empty() {
            out.push_str(&rr_interval_titles());
        }
        for (n, i) in self.client.intervals.iter().enumerate() {
            out.push_str(&rr_interval_line(&self.spec, n, i, self.interval_latency.get(n)));
        }
        out.push_str(&self.render_summary());
        out
    }

    /// The text that follows lines printed live (header, placement, intervals): with `-v`
    /// each side's path, then the summary.
    pub fn render_after_live(&self, detail: Detail) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        if detail.shows_data_path() {
            let _ = writeln!(out, "client path: {}", self.client.path);
            if let Some(srv) = &self.server {
                let _ = writeln!(out, "server path: {}", srv.path);
            }
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
