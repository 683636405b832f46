//! What an http run measured, as its document holds it: the totals, the failures by kind,
//! the latency percentiles and the intervals (docs/output.md, the http document).

use crate::metrics::document::{Kind, Tool};
use crate::metrics::figures::IntervalCpu;
use crate::metrics::run_figures::RunFigures;
use crate::transport::http::ErrorCounts;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// Latency percentiles in microseconds (key `latency_us` of docs/output.md).
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct LatencyUs {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
    pub min: u64,
}

impl LatencyUs {
    /// The percentiles of `hist` (µs); all zero when it is empty.
    pub(crate) fn of(hist: &Histogram<u64>) -> Self {
        if hist.is_empty() {
            return Self::default();
        }
        Self {
            p50: hist.value_at_quantile(0.50),
            p90: hist.value_at_quantile(0.90),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            max: hist.max(),
            mean: hist.mean(),
            min: hist.min(),
        }
    }
}

/// One entry of an http document's `intervals[]`: the requests whose response completed
/// (or that failed) inside the stretch, as the client's threads counted them.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HttpInterval {
    /// Seconds since the run started.
    pub start: f64,
    pub end: f64,
    /// Responses received (any status).
    pub requests: u64,
    /// `requests` ÷ the interval.
    pub transactions_per_second: f64,
    pub bytes_read: u64,
    /// Responses with a status outside 200-299 (counted in `requests` too).
    pub non_2xx: u64,
    /// Failed requests, all kinds together (never in `requests`).
    pub errors: u64,
    /// Percentiles of this interval's responses only (all zero without one).
    pub latency_us: LatencyUs,
    /// The client's CPU over the interval: its load threads and the host's CPUs.
    pub cpu: Option<IntervalCpu>,
}

/// The client's own CPU time over the run, from its threads' /proc/self/task stat times.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ClientCpu {
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// (user + system) µs per completed request.
    pub us_per_request: f64,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HttpReport {
    pub url: String,
    pub method: String,
    pub connections: u32,
    pub threads: u32,
    pub keep_alive: bool,
    /// Requested total rate (requests/s), if any.
    pub rate: Option<f64>,
    pub window_seconds: f64,
    /// Responses received (any status).
    pub requests: u64,
    pub transactions_per_second: f64,
    pub bytes_read: u64,
    pub bytes_per_second: f64,
    pub latency_us: LatencyUs,
    /// Responses per status code.
    #[serde(deserialize_with = "status_counts")]
    pub status: BTreeMap<u16, u64>,
    pub non_2xx: u64,
    pub errors: ErrorCounts,
    pub connections_opened: u64,
    pub cpu: ClientCpu,
    /// Whether the run went as asked: no request failed and at least one response came back.
    pub complete: bool,
    /// Set when a signal ended the run before `-d` or `-n`: how far it got.
    pub interrupted: Option<String>,
    /// The run, interval by interval (`-i`); their requests add up to `requests`. Empty in
    /// documents written before this field.
    #[serde(default)]
    pub intervals: Vec<HttpInterval>,
}

/// `http -J`: the run's figures in the common envelope.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HttpDocument {
    /// `http` (documents written before `kind` existed have none).
    #[serde(default = "http_kind")]
    pub kind: Kind,
    pub schema_version: u32,
    #[serde(default = "Tool::this")]
    pub tool: Tool,
    pub test: HttpTest,
    /// The sum of `errors`' counts.
    pub errors_total: u64,
    #[serde(flatten)]
    pub report: HttpReport,
}

impl HttpDocument {
    /// The run's figures: its transactions per second and p99 latency (an http run has no
    /// verdict).
    pub fn figures(&self) -> RunFigures {
        RunFigures {
            complete: self.report.complete,
            error: self.report.interrupted.clone(),
            transactions_per_second: Some(self.report.transactions_per_second),
            p99_us: Some(self.report.latency_us.p99 as f64),
            ..RunFigures::default()
        }
    }
}

/// `status` read back: JSON object keys are strings, and a flattened document hands them over
/// as such, so the status codes are parsed here (a key that is not one is an error).
fn status_counts<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<BTreeMap<u16, u64>, D::Error> {
    let by_text: BTreeMap<String, u64> = serde::Deserialize::deserialize(d)?;
    by_text.into_iter().map(|(code, n)| code.parse::<u16>().map(|c| (c, n)).map_err(serde::de::Error::custom)).collect()
}

fn http_kind() -> Kind {
    Kind::Http
}

/// An http document's `test`: the workload and what it loaded.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HttpTest {
    pub workload: String,
    pub url: String,
}
