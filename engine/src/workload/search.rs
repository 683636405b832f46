//! `uringbench search`: the highest offered rate the path carries with loss at or below a
//! threshold, by binary search over trials (RFC 2544 §26.1 "throughput").
//!
//! The first trial is unpaced: it shows what the sender can offer at all, and if even that
//! loses nothing, it is the answer. Otherwise the search bisects between 0 and that rate (or
//! `--max-rate`) until the interval is narrower than the resolution, then repeats the best
//! passing rate `confirm` times; a failed confirmation makes that rate the new upper bound and
//! the search goes on below it. A trial passes when it completed, its loss is within the
//! threshold, and the sender really offered the rate asked (a sender held back by its socket
//! buffer has not tested that rate).

use crate::base::error::{Error, Result};
use crate::base::spec::TestSpec;
use crate::base::units::format_bits_per_second;
use crate::metrics::document::{Kind, Tool, SCHEMA_VERSION};
use crate::metrics::run_figures::RunFigures;
use serde::{Deserialize, Serialize};

/// A paced trial counts as offered when the sender reached this share of the rate asked.
pub(crate) const OFFERED_SHARE: f64 = 0.97;
/// Trials at most, whatever the resolution: a bound on the search's time.
pub(crate) const MAX_TRIALS: usize = 40;

#[derive(Debug, Clone)]
pub struct SearchPlan {
    /// The test of every trial (its `rate_bps` is set per trial).
    pub spec: TestSpec,
    /// Highest loss that passes: a fraction (0.001 = 0.1%). TCP: retransmitted ÷ sent bytes.
    pub loss_threshold: f64,
    /// Stop bisecting when the interval is narrower than this share of the upper bound.
    pub resolution: f64,
    /// Repeats of the final rate, all of which must pass.
    pub confirm: u32,
    /// Upper bound; None: the sender's unpaced rate, from a first trial.
    pub max_rate_bps: Option<u64>,
    /// `--max-latency`: a trial passes only when the latency probe's loaded p99 round trip
    /// (ms) stays at or under this (the spec runs the probe).
    pub max_latency_ms: Option<f64>,
}

/// A trial's figures under the keys a saved search has always held them (`steps[].figures`):
/// the sender's rate as `offered_bps`, the receiver's as `received_bps`, and the loss the
/// search judged (UDP's datagram loss, TCP's retransmitted share) as `loss_ratio`.
mod trial_keys {
    use crate::metrics::run_figures::RunFigures;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The figures of one trial that the search needs.
    #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    #[schemars(rename = "TrialFigures")]
    pub(super) struct TrialKeys {
        complete: bool,
        offered_bps: f64,
        received_bps: Option<f64>,
        /// UDP: lost ÷ expected datagrams over the whole trial; TCP: retransmitted ÷ sent bytes.
        loss_ratio: Option<f64>,
        error: Option<String>,
        /// `--latency`: the probe's loaded p99 round trip in ms (absent without the probe).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        loaded_p99_ms: Option<f64>,
    }

    pub(super) fn serialize<S: Serializer>(f: &RunFigures, s: S) -> Result<S::Ok, S::Error> {
        TrialKeys {
            complete: f.complete,
            offered_bps: super::offered_bps(f),
            received_bps: f.receiver_bits_per_second,
            loss_ratio: f.loss_or_retransmit_ratio(),
            error: f.error.clone(),
            loaded_p99_ms: f.loaded_p99_ms,
        }
        .serialize(s)
    }

    /// A saved trial's loss reads back as `loss_ratio` whatever the protocol (the document
    /// keeps one loss figure per trial), which is where the search's loss is read from.
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RunFigures, D::Error> {
        let t = TrialKeys::deserialize(d)?;
        Ok(RunFigures {
            complete: t.complete,
            sender_bits_per_second: Some(t.offered_bps),
            receiver_bits_per_second: t.received_bps,
            loss_ratio: t.loss_ratio,
            error: t.error,
            loaded_p99_ms: t.loaded_p99_ms,
            ..RunFigures::default()
        })
    }
}

/// The rate a trial's sender offered, bits/s (0 when it reported none).
pub fn offered_bps(f: &RunFigures) -> f64 {
    f.sender_bits_per_second.unwrap_or(0.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The unpaced first trial.
    Probe,
    Search,
    Confirm,
}

/// One trial at one rate, as reported.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RateTrial {
    pub step: usize,
    pub phase: Phase,
    /// Rate asked for; 0 = unpaced.
    pub rate_bps: u64,
    pub pps: f64,
    #[serde(with = "trial_keys")]
    #[schemars(with = "trial_keys::TrialKeys")]
    pub figures: RunFigures,
    pub passed: bool,
    /// Why it failed, in words.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchResult {
    /// The highest rate that passed every confirmation; None when none did.
    pub rate_bps: Option<f64>,
    pub pps: Option<f64>,
    pub loss_threshold: f64,
    pub resolution: f64,
    pub confirm: u32,
    /// The unpaced first trial lost nothing (the search then looked above its rate).
    pub probe_passed: bool,
    /// `--max-latency`: the loaded p99 round trip (ms) every passing trial stayed under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency_ms: Option<f64>,
    pub steps: Vec<RateTrial>,
}

fn pps_of(rate_bps: f64, len: u32) -> f64 {
    rate_bps / (f64::from(len.max(1)) * 8.0)
}

/// Whether a trial at `rate` (0 = unpaced) passed, and if not, why.
fn judge(rate: u64, f: &RunFigures, threshold: f64, max_latency_ms: Option<f64>) -> (bool, Option<String>) {
    if !f.complete {
        return (false, Some(format!("incomplete: {}", f.error.as_deref().unwrap_or("no receiver report"))));
    }
    let Some(loss) = f.loss_or_retransmit_ratio() else {
        return (false, Some("no loss figure in the report".into()));
    };
    if loss > threshold {
        return (false, Some(format!("loss {:.3}% above {:.3}%", loss * 100.0, threshold * 100.0)));
    }
    if let Some(ceiling) = max_latency_ms {
        match f.loaded_p99_ms {
            None => return (false, Some("no loaded latency figure (the probe was not answered under load)".into())),
            Some(p99) if p99 > ceiling => {
                return (false, Some(format!("loaded p99 latency {p99:.2} ms above {ceiling:.2} ms")))
            }
            Some(_) => {}
        }
    }
    let offered = offered_bps(f);
    if rate > 0 && offered < rate as f64 * OFFERED_SHARE {
        return (
            false,
            Some(format!(
                "the sender offered only {} of {}",
                format_bits_per_second(offered),
                format_bits_per_second(rate as f64)
            )),
        );
    }
    (true, None)
}

/// Runs the search. `trial` runs one test at a rate (0 = unpaced) and gives its figures (read
/// from its document); `progress` sees each step.
/// An error from `trial` ends the search (the receiver refused, vanished...).
pub fn search(
    plan: &SearchPlan,
    mut trial: impl FnMut(&TestSpec) -> Result<RunFigures>,
    mut progress: impl FnMut(&RateTrial),
) -> Result<SearchResult> {
    if !(0.0..1.0).contains(&plan.loss_threshold) {
        return Err(Error::usage("--loss must be at least 0% and below 100%"));
    }
    if !(plan.resolution > 0.0 && plan.resolution < 0.5) {
        return Err(Error::usage("--resolution must be above 0% and below 50%"));
    }
    if plan.confirm == 0 {
        return Err(Error::usage("--confirm must be at least 1"));
    }
    if let Some(ms) = plan.max_latency_ms {
        if !(ms > 0.0 && ms.is_finite()) {
            return Err(Error::usage("--max-latency must be longer than 0"));
        }
        if !plan.spec.latency {
            return Err(Error::usage("--max-latency needs the latency probe (--latency)"));
        }
    }
    let len = plan.spec.len;
    let mut steps: Vec<RateTrial> = Vec::new();
    let mut run = |rate: u64, phase: Phase, steps: &mut Vec<RateTrial>| -> Result<bool> {
        if steps.len() >= MAX_TRIALS {
            return Err(Error::usage(format!("search stopped after {MAX_TRIALS} trials without converging")));
        }
        let spec = TestSpec { rate_bps: rate, ..plan.spec.clone() };
        let figures = trial(&spec)?;
        let (passed, reason) = judge(rate, &figures, plan.loss_threshold, plan.max_latency_ms);
        let shown = if rate == 0 { offered_bps(&figures) } else { rate as f64 };
        let step = RateTrial {
            step: steps.len() + 1,
            phase,
            rate_bps: rate,
            pps: pps_of(shown, len),
            figures,
            passed,
            reason,
        };
        progress(&step);
        steps.push(step);
        Ok(passed)
    };
    let finish = |rate: Option<f64>, steps: Vec<RateTrial>| SearchResult {
        rate_bps: rate,
        pps: rate.map(|r| pps_of(r, len)),
        loss_threshold: plan.loss_threshold,
        resolution: plan.resolution,
        confirm: plan.confirm,
        probe_passed: steps.first().is_some_and(|s| s.phase == Phase::Probe && s.passed),
        max_latency_ms: plan.max_latency_ms,
        steps,
    };

    // The bracket. A probe that lost nothing is a pass at the rate it offered, but not
    // necessarily the most the path carries: a sender held back by its socket buffer (a
    // shaping qdisc on the way) offers less unpaced than it can when paced. So the search
    // then goes on above it, up to twice that rate.
    let mut lo = 0.0_f64;
    let mut best: Option<f64> = None;
    let mut hi = match plan.max_rate_bps {
        Some(r) => r as f64,
        None => {
            let passed = run(0, Phase::Probe, &mut steps)?;
            let offered = (offered_bps(&steps[0].figures) / 1000.0).floor() * 1000.0;
            if offered <= 0.0 {
                return Err(Error::peer("the unpaced trial offered nothing: no rate to search below"));
            }
            if passed {
                lo = offered;
                best = Some(offered);
                2.0 * offered
            } else {
                offered
            }
        }
    };
    let step_bps = hi * plan.resolution;
    if plan.max_rate_bps.is_some() && run(hi as u64, Phase::Search, &mut steps)? {
        best = Some(hi);
        lo = hi;
    }
    loop {
        while hi - lo > step_bps {
            // Rates are whole kilobits: the search never asks for sub-kbit precision.
            let mid = (((lo + hi) / 2.0) / 1000.0).round() * 1000.0;
            if run(mid as u64, Phase::Search, &mut steps)? {
                lo = mid;
                best = Some(mid);
            } else {
                hi = mid;
            }
        }
        let Some(candidate) = best else {
            return Ok(finish(None, steps));
        };
        let mut all = true;
        for _ in 0..plan.confirm {
            if !run(candidate as u64, Phase::Confirm, &mut steps)? {
                all = false;
                break;
            }
        }
        if all {
            return Ok(finish(Some(candidate), steps));
        }
        // The candidate did not hold up: it is the new upper bound, and what passed below it
        // is the new lower one.
        hi = candidate;
        lo = steps
            .iter()
            .filter(|s| s.passed && s.rate_bps > 0 && (s.rate_bps as f64) < candidate)
            .map(|s| s.rate_bps as f64)
            .fold(0.0, f64::max);
        best = (lo > 0.0).then_some(lo);
    }
}

impl SearchResult {
    /// Exit status: 0 when a rate was found, 1 when even the lowest rate tried lost.
    pub fn found(&self) -> bool {
        self.rate_bps.is_some()
    }

    /// The saved document (`search -J`).
    pub fn to_document(&self, spec: &TestSpec, target: &str) -> SearchDocument {
        SearchDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Search,
            tool: Tool::this(),
            target: target.to_owned(),
            test: spec.clone(),
            result: self.clone(),
        }
    }
}

/// A search as saved: the test, the rate found and every trial.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: Tool,
    pub target: String,
    /// The test of every trial (its rate set per trial).
    pub test: TestSpec,
    #[serde(flatten)]
    pub result: SearchResult,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::spec::Proto;

    /// A trial's figures: what the sender offered, the receiver counted and the loss.
    fn trial(offered: f64, received: f64, loss: f64) -> RunFigures {
        RunFigures {
            complete: true,
            sender_bits_per_second: Some(offered),
            receiver_bits_per_second: Some(received),
            loss_ratio: Some(loss),
            ..RunFigures::default()
        }
    }

    /// A path that carries `capacity` bits/s and drops the excess; the sender offers at most
    /// `sender_max`.
    fn path(capacity: f64, sender_max: f64) -> impl FnMut(&TestSpec) -> Result<RunFigures> {
        move |spec| {
            let offered = if spec.rate_bps == 0 { sender_max } else { (spec.rate_bps as f64).min(sender_max) };
            let received = offered.min(capacity);
            Ok(trial(offered, received, 1.0 - received / offered))
        }
    }

    fn plan(max: Option<u64>) -> SearchPlan {
        SearchPlan {
            spec: TestSpec { proto: Proto::Udp, len: 1470, ..TestSpec::default() },
            loss_threshold: 0.0,
            resolution: 0.01,
            confirm: 3,
            max_rate_bps: max,
            max_latency_ms: None,
        }
    }

    #[test]
    fn finds_the_capacity_within_the_resolution() {
        let r = search(&plan(None), path(2e9, 50e9), |_| {}).unwrap();
        let rate = r.rate_bps.unwrap();
        assert!(rate <= 2e9 && rate > 2e9 - 0.01 * 50e9, "{rate}");
        assert_eq!(r.steps[0].phase, Phase::Probe);
        assert!(!r.steps[0].passed);
        assert_eq!(r.steps.iter().filter(|s| s.phase == Phase::Confirm).count(), 3);
        assert!(r.steps.len() < 15, "{} trials", r.steps.len());
        assert!((r.pps.unwrap() - rate / (1470.0 * 8.0)).abs() < 1e-6);
    }

    #[test]
    fn an_unpaced_sender_that_loses_nothing_is_the_answer() {
        let r = search(&plan(None), path(100e9, 6e9), |_| {}).unwrap();
        // Within the share the sender may fall short of a paced rate (3%) above what it offers.
        let rate = r.rate_bps.unwrap();
        assert!(r.probe_passed && (6e9..=6e9 / OFFERED_SHARE).contains(&rate), "{r:?}");
        assert!(r.steps[1].reason.as_deref().unwrap().contains("offered only"), "{r:?}");
        // A sender held back unpaced (4G) that reaches 5G when paced: found above the probe.
        let mut held = path(5e9, 100e9);
        let backpressured = move |spec: &TestSpec| {
            let mut f = held(spec)?;
            if spec.rate_bps == 0 {
                f = RunFigures { loss_ratio: Some(0.0), ..trial(4e9, 4e9, 0.0) };
            }
            Ok(f)
        };
        let r = search(&plan(None), backpressured, |_| {}).unwrap();
        let rate = r.rate_bps.unwrap();
        assert!(rate <= 5e9 && rate > 4.9e9, "{rate}");
    }

    #[test]
    fn a_latency_ceiling_finds_the_highest_rate_under_it() {
        // 4G carried without loss, but above 1G a queue builds: loaded p99 50 ms.
        let mut inner = path(4e9, 50e9);
        let queued = move |spec: &TestSpec| {
            let mut f = inner(spec)?;
            let rate = if spec.rate_bps == 0 { 50e9 } else { spec.rate_bps as f64 };
            f.loaded_p99_ms = Some(if rate > 1e9 { 50.0 } else { 0.5 });
            Ok(f)
        };
        let ceiling = SearchPlan {
            spec: TestSpec { latency: true, ..plan(None).spec },
            max_latency_ms: Some(5.0),
            ..plan(Some(4_000_000_000))
        };
        let r = search(&ceiling, queued, |_| {}).unwrap();
        let rate = r.rate_bps.unwrap();
        assert!(rate <= 1e9 && rate > 1e9 - 0.01 * 4e9, "{rate}");
        assert!(r
            .steps
            .iter()
            .any(|s| s.reason.as_deref().is_some_and(|w| w.contains("p99 latency 50.00 ms above 5.00 ms"))));
        assert_eq!(r.max_latency_ms, Some(5.0));
        let no_probe = SearchPlan { max_latency_ms: Some(5.0), ..plan(None) };
        let err = search(&no_probe, path(1.0, 1.0), |_| {}).unwrap_err();
        assert!(err.message.contains("--latency"), "{err}");
    }

    #[test]
    fn a_rate_the_sender_cannot_offer_fails() {
        // Max 10G asked, but the sender tops out at 3G on a path of 100G.
        let r = search(&plan(Some(10_000_000_000)), path(100e9, 3e9), |_| {}).unwrap();
        let rate = r.rate_bps.unwrap();
        assert!(rate <= 3e9 / OFFERED_SHARE && rate > 2.8e9, "{rate}");
        assert!(r.steps[0].reason.as_deref().unwrap().contains("offered only"));
    }

    #[test]
    fn a_failed_confirmation_moves_the_search_down() {
        // The path holds 2G except that every trial above 1.9G fails on its second try.
        let mut tries = std::collections::HashMap::new();
        let mut inner = path(2e9, 50e9);
        let flaky = move |spec: &TestSpec| {
            let mut f = inner(spec)?;
            let n = tries.entry(spec.rate_bps).or_insert(0);
            *n += 1;
            if spec.rate_bps as f64 > 1.9e9 && *n >= 2 {
                f.loss_ratio = Some(0.01);
            }
            Ok(f)
        };
        let r = search(&plan(None), flaky, |_| {}).unwrap();
        assert!(r.rate_bps.unwrap() <= 1.9e9, "{r:?}");
    }

    #[test]
    fn nothing_passes_and_errors_end_the_search() {
        let lossy = |spec: &TestSpec| Ok(trial(if spec.rate_bps == 0 { 1e9 } else { spec.rate_bps as f64 }, 0.0, 0.5));
        let r = search(&plan(None), lossy, |_| {}).unwrap();
        assert!(!r.found());
        let failing = |_: &TestSpec| -> Result<RunFigures> { Err(Error::peer("receiver refused")) };
        assert!(search(&plan(None), failing, |_| {}).is_err());
        let bad = SearchPlan { loss_threshold: 1.5, ..plan(None) };
        assert_eq!(search(&bad, path(1.0, 1.0), |_| {}).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn figures_of_a_report_document() {
        // Documents the release before the typed model wrote, from real runs.
        use crate::metrics::document::StreamDocument;
        use serde_json::Value;
        let read = |text: &str| -> (Value, StreamDocument) {
            let raw: Value = serde_json::from_str(text).unwrap();
            (raw.clone(), serde_json::from_value(raw).unwrap())
        };
        let (raw, udp) = read(include_str!("../../tests/fixtures/53b0d44/stream-udp.json"));
        let f = RunFigures::of_stream(&udp);
        assert_eq!(Some(offered_bps(&f)), raw["sum"]["sender"]["bits_per_second"].as_f64());
        assert_eq!(f.loss_or_retransmit_ratio(), raw["sum"]["receiver"]["loss_ratio"].as_f64());
        let (raw, mut tcp) = read(include_str!("../../tests/fixtures/53b0d44/stream-tcp.json"));
        assert!(f.receiver_bits_per_second.is_some());
        let sent = raw["tcp"]["sender"]["bytes_sent"].as_u64().unwrap();
        assert!(sent > 0);
        tcp.tcp.sender.bytes_retrans = sent / 100;
        assert_eq!(RunFigures::of_stream(&tcp).loss_or_retransmit_ratio(), Some((sent / 100) as f64 / sent as f64));
        // Saved, a trial keeps the keys searches were always saved with, and reads back.
        let step = RateTrial {
            step: 1,
            phase: Phase::Probe,
            rate_bps: 0,
            pps: 1.0,
            figures: RunFigures::of_stream(&tcp),
            passed: true,
            reason: None,
        };
        let saved = serde_json::to_value(&step).unwrap();
        let mut keys: Vec<&str> = saved["figures"].as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["complete", "error", "loss_ratio", "offered_bps", "received_bps"]);
        assert_eq!(saved["figures"]["loss_ratio"].as_f64(), Some((sent / 100) as f64 / sent as f64));
        let back: RateTrial = serde_json::from_value(saved.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), saved);
    }
}
