//! The rate search in text: one line per trial as it runs, and the result.

use crate::base::spec::{Proto, TestSpec};
use crate::base::units::format_bits_per_second;
use crate::workload::search::{offered_bps, Phase, RateTrial, SearchResult};
use std::fmt::Write as _;

impl SearchResult {
    pub fn step_line(s: &RateTrial) -> String {
        let rate = if s.rate_bps == 0 {
            format!("unpaced ({})", format_bits_per_second(offered_bps(&s.figures)))
        } else {
            format_bits_per_second(s.rate_bps as f64)
        };
        let received = s.figures.receiver_bits_per_second.map_or("-".into(), format_bits_per_second);
        let loss = s.figures.loss_or_retransmit_ratio().map_or("-".into(), |l| format!("{:.3}%", l * 100.0));
        let phase = match s.phase {
            Phase::Probe => "probe",
            Phase::Search => "search",
            Phase::Confirm => "confirm",
        };
        let p99 = s.figures.loaded_p99_ms.map_or(String::new(), |p| format!("  loaded p99 {p:.2} ms"));
        format!(
            "{:>4}  {phase:<7}  {rate:<26}  {:>12.0}  {received:<18}  {loss:>8}  {}{p99}",
            s.step,
            s.pps,
            if s.passed { "pass".to_string() } else { format!("FAIL: {}", s.reason.as_deref().unwrap_or("")) }
        )
    }

    pub const STEP_HEADER: &'static str =
        "step  phase    offered rate                 datagrams/s  received             loss      result";

    pub fn render_text(&self, spec: &TestSpec) -> String {
        let mut out = format!("{}\n", Self::STEP_HEADER);
        for s in &self.steps {
            let _ = writeln!(out, "{}", Self::step_line(s));
        }
        let what = if spec.proto == Proto::Udp { "loss" } else { "retransmitted bytes" };
        let ceiling = self.max_latency_ms.map_or(String::new(), |ms| format!(" and loaded p99 latency <= {ms:.2} ms"));
        match (self.rate_bps, self.pps) {
            (Some(r), Some(p)) => {
                let _ = writeln!(
                    out,
                    "result: {} ({p:.0} datagrams/s of {} B), {what} <= {:.3}%{ceiling} in {} of {} confirmation trials",
                    format_bits_per_second(r),
                    spec.len,
                    self.loss_threshold * 100.0,
                    self.confirm,
                    self.confirm
                );
            }
            _ => {
                let lowest = self.steps.iter().map(|s| s.rate_bps).filter(|&r| r > 0).min().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "result: none: even the lowest rate tried ({}) exceeded {what} {:.3}%{ceiling}",
                    format_bits_per_second(lowest as f64),
                    self.loss_threshold * 100.0
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::run_figures::RunFigures;

    fn trial(step: usize, phase: Phase, rate_bps: u64, loss: f64, passed: bool) -> RateTrial {
        RateTrial {
            step,
            phase,
            rate_bps,
            pps: rate_bps as f64 / 8.0 / 1470.0,
            figures: RunFigures {
                complete: true,
                sender_bits_per_second: Some(rate_bps as f64),
                receiver_bits_per_second: Some(rate_bps as f64 * (1.0 - loss)),
                loss_ratio: Some(loss),
                ..RunFigures::default()
            },
            passed,
            reason: (!passed).then(|| format!("loss {:.3}% above 0.100%", loss * 100.0)),
        }
    }

    #[test]
    fn the_result_names_the_rate_or_the_lowest_rate_tried() {
        let spec = TestSpec { proto: Proto::Udp, len: 1470, ..TestSpec::default() };
        let mut r = SearchResult {
            rate_bps: None,
            pps: None,
            loss_threshold: 0.001,
            resolution: 0.05,
            confirm: 2,
            probe_passed: false,
            max_latency_ms: None,
            steps: vec![
                trial(1, Phase::Search, 2_000_000_000, 0.3, false),
                trial(2, Phase::Search, 1_000_000_000, 0.1, false),
            ],
        };
        let text = r.render_text(&spec);
        assert!(text.starts_with(SearchResult::STEP_HEADER), "{text}");
        assert!(text.contains("FAIL: loss 30.000% above 0.100%"), "{text}");
        assert!(text.contains("even the lowest rate tried (1.00 Gbits/sec) exceeded loss 0.100%"), "{text}");
        r.rate_bps = Some(5e8);
        r.pps = Some(5e8 / 8.0 / 1470.0);
        r.steps.push(trial(3, Phase::Confirm, 500_000_000, 0.0, true));
        let text = r.render_text(&spec);
        assert!(
            text.contains("result: 500.00 Mbits/sec (42517 datagrams/s of 1470 B), loss <= 0.100% in 2 of 2"),
            "{text}"
        );
    }
}
