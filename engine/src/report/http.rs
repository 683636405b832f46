//! How an http run is shown: wrk-like text, the `http -J` document and its CSV row. The
//! figures are workload/http/'s.

use crate::metrics::document::{Kind, Tool};
use crate::transport::http::FailKind;
use crate::workload::http::{HttpDocument, HttpInterval, HttpReport, HttpTest};
use std::fmt::Write as _;

impl HttpReport {
    /// One live line of an interval, as rr's `[SUM]` lines.
    pub fn interval_line(i: &HttpInterval) -> String {
        let l = &i.latency_us;
        let failed = if i.errors > 0 { format!("  {} errors", i.errors) } else { String::new() };
        let non_2xx = if i.non_2xx > 0 { format!("  {} non-2xx", i.non_2xx) } else { String::new() };
        format!(
            "[SUM] {:5.2}-{:<5.2} sec  {:>9} requests  {:>10.0} req/s  p50 {} us  p99 {} us  max {} us{non_2xx}{failed}\n",
            i.start, i.end, i.requests, i.transactions_per_second, l.p50, l.p99, l.max
        )
    }

    /// Text report in the spirit of wrk's.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let rate = self.rate.map_or(String::new(), |r| format!(", target {r:.0} req/s"));
        let _ = writeln!(
            out,
            "{} {}: {} connections on {} threads, {:.2} s{}{}",
            self.method,
            self.url,
            self.connections,
            self.threads,
            self.window_seconds,
            if self.keep_alive { "" } else { ", no keep-alive" },
            rate
        );
        let _ = writeln!(
            out,
            "  requests   {} ({:.1}/s), {} read ({}/s), {} connections opened",
            self.requests,
            self.transactions_per_second,
            crate::base::units::format_bytes(self.bytes_read),
            crate::base::units::format_bytes(self.bytes_per_second as u64),
            self.connections_opened
        );
        let l = &self.latency_us;
        let _ = writeln!(
            out,
            "  latency    p50 {} us  p90 {} us  p99 {} us  p99.9 {} us  max {} us  (mean {:.1} us{})",
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            l.mean,
            if self.rate.is_some() { ", from scheduled send times" } else { "" }
        );
        let status: Vec<String> = self.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(
            out,
            "  status     {}{}",
            if status.is_empty() { "none".into() } else { status.join(", ") },
            if self.non_2xx > 0 { format!("  ({} non-2xx)", self.non_2xx) } else { String::new() }
        );
        let e = &self.errors;
        if e.total() == 0 {
            let _ = writeln!(out, "  errors     none");
        } else {
            let kinds: Vec<String> = FailKind::ALL
                .iter()
                .filter(|k| e.get(**k) > 0)
                .map(|k| format!("{} {}", k.name(), e.get(*k)))
                .collect();
            let _ = writeln!(out, "  errors     {}", kinds.join(", "));
            for (kind, example) in &e.examples {
                let _ = writeln!(out, "    {kind}: {example}");
            }
        }
        let _ = writeln!(
            out,
            "  client CPU {:.2} s user, {:.2} s system: {:.1} us per request",
            self.cpu.user_seconds, self.cpu.system_seconds, self.cpu.us_per_request
        );
        if let Some(i) = &self.interrupted {
            let _ = writeln!(out, "incomplete: {i}");
        } else if !self.complete {
            let _ = writeln!(
                out,
                "incomplete: {}",
                if self.requests == 0 {
                    "no response received".to_string()
                } else {
                    format!("{} requests failed", e.total())
                }
            );
        }
        out
    }

    /// The document `http -J` writes (keys `latency_us` and `transactions_per_second` of
    /// docs/output.md).
    pub fn to_document(&self) -> HttpDocument {
        HttpDocument {
            kind: Kind::Http,
            schema_version: crate::metrics::figures::SCHEMA_VERSION,
            tool: Tool::this(),
            test: HttpTest { workload: "http".into(), url: self.url.clone() },
            errors_total: self.errors.total(),
            report: self.clone(),
        }
    }

    /// Columns of [`HttpReport::csv_row`].
    pub const CSV_HEADER: &'static str = "url,connections,threads,seconds,requests,transactions_per_second,bytes_read,bytes_per_second,p50_us,p90_us,p99_us,p999_us,max_us,non_2xx,errors_connect,errors_write,errors_read,errors_timeout,errors_malformed,errors_oversized_headers,cpu_us_per_request";

    /// One CSV row for the whole run.
    pub fn csv_row(&self) -> String {
        let l = &self.latency_us;
        let e = &self.errors;
        format!(
            "{},{},{},{:.3},{},{:.1},{},{:.0},{},{},{},{},{},{},{},{},{},{},{},{},{:.2}",
            self.url.replace(',', "%2C"),
            self.connections,
            self.threads,
            self.window_seconds,
            self.requests,
            self.transactions_per_second,
            self.bytes_read,
            self.bytes_per_second,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            self.non_2xx,
            e.connect,
            e.write,
            e.read,
            e.timeout,
            e.malformed,
            e.oversized_headers,
            self.cpu.us_per_request
        )
    }
}
