//! The bottleneck verdict: one line naming what most likely limited a run, with the figure
//! behind it (the `verdict` key of docs/output.md).
//!
//! Rules run from the most specific explanation to the most generic: UDP datagram loss, a
//! limit the user set (`-b`/`--rate`), a limit configured on the path (qdisc, link speed, cloud egress cap), TCP telling
//! us it waited (receive window, send buffer, retransmissions), then CPU. The first rule whose
//! figure crosses its threshold wins; none crossing gives "no clear bottleneck". Thresholds are
//! constants here so the docs and the tests quote the same numbers.

use crate::base::units::format_bits_per_second;
use crate::metrics::figures::Evidence;
use crate::metrics::latency::WorkingLatency;
pub use crate::metrics::verdict::{Bottleneck, Verdict};
use crate::sys::netpath::{LimitKind, PathLimit};

/// Received share of a configured or path rate at which that rate is named the limit.
pub(crate) const RATE_SHARE: f64 = 0.85;
/// Share of TCP busy time limited by the receive window or send buffer that names it.
pub(crate) const TCP_LIMITED_SHARE: f64 = 0.2;
/// Retransmitted share of bytes that names loss.
pub(crate) const RETRANS_SHARE: f64 = 0.01;
/// Queue thread or host CPU busy share that counts as saturated.
pub(crate) const CPU_SATURATED: f64 = 0.95;
/// A queue thread below this share on a saturated CPU was starved by other work.
pub(crate) const THREAD_STARVED: f64 = 0.8;

/// Growth of the median round trip under load, in ms, from which the verdict names a queue.
pub(crate) const QUEUE_GROWTH_MS: f64 = 1.0;
/// ... and the factor over the idle median it must also reach (a 0.1 ms path at 1.1 ms).
pub(crate) const QUEUE_FACTOR: f64 = 4.0;

/// The queue a load built (`--latency`): a standing queue when the loaded median round trip
/// grew by [`QUEUE_GROWTH_MS`] and [`QUEUE_FACTOR`] times the idle one; bursts when only the
/// 99th percentile did. Named where this host can see it (a shaping qdisc on its egress),
/// else placed beyond this host; sized as the growth times the rate the load was received at.
pub(crate) fn queue_finding(
    l: &WorkingLatency,
    limits: &[PathLimit],
    egress: Option<&str>,
    received_bps: f64,
) -> Option<String> {
    let grew = |idle: f64, loaded: f64| loaded - idle >= QUEUE_GROWTH_MS && loaded >= QUEUE_FACTOR * idle;
    let growth = l.median_growth_ms()?;
    let (kind, ms, idle, loaded) = if grew(l.idle.p50_ms, l.loaded.p50_ms) {
        ("a standing queue", growth, l.idle.p50_ms, l.loaded.p50_ms)
    } else if grew(l.idle.p99_ms, l.loaded.p99_ms) {
        ("a queue that fills in bursts (p99)", l.inflation.p99_ms, l.idle.p99_ms, l.loaded.p99_ms)
    } else {
        return None;
    };
    let bytes = ms / 1e3 * received_bps / 8.0;
    let size = if bytes > 0.0 {
        format!(
            ", about {} at the {} received",
            crate::base::units::format_bytes(bytes as u64),
            format_bits_per_second(received_bps)
        )
    } else {
        String::new()
    };
    let place = match limits.iter().find(|p| p.kind == LimitKind::Qdisc) {
        Some(q) => format!(
            "at the {} (this host's egress shaper, {})",
            q.what.trim_start_matches("qdisc "),
            format_bits_per_second(q.bits_per_second)
        ),
        None => {
            let here = egress.map(|i| format!(" {i}")).unwrap_or_default();
            match &l.receiver_queues {
                Some(r) if r.could_hold() => {
                    let mut there = Vec::new();
                    if let Some(i) = &r.ingress {
                        there.push(format!("{i} qdisc on {} (ingress)", r.interface));
                    }
                    if let Some(e) = &r.egress_shaper {
                        there.push(format!("{e} shaper on {} (egress: what it sends back)", r.interface));
                    }
                    format!("beyond this host (no shaper holds its egress{here}): the receiver's {} could hold it, or the path between", there.join(" or "))
                }
                Some(r) => format!(
                    "not on either end: on the path between (no shaper holds this host's egress{here}, and the receiver's {} has no shaper and no ingress qdisc)",
                    r.interface
                ),
                None => format!("beyond this host: no shaper holds its egress{here}, so a router's or the receiver's queue on the path"),
            }
        }
    };
    Some(format!("latency +{ms:.1} ms under load ({idle:.2} -> {loaded:.2} ms): {kind} {place}{size}"))
}

/// A saturated CPU on one side: `sender cpu` or `receiver cpu`.
fn cpu_of(side: &str) -> Bottleneck {
    if side == "sender" {
        Bottleneck::SenderCpu
    } else {
        Bottleneck::ReceiverCpu
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn verdict(bottleneck: Bottleneck, evidence: String) -> Verdict {
    Verdict { bottleneck, evidence, queue: None }
}

/// Applies the rules in order: the first that names a limit wins.
pub(crate) fn diagnose(e: &Evidence) -> Verdict {
    incomplete(e)
        .or_else(|| outage(e))
        .or_else(|| datagram_loss(e))
        .or_else(|| configured_rate(e))
        .or_else(|| path_limit(e))
        .or_else(|| tcp_waited(e))
        .or_else(|| starved_cpu(e))
        .or_else(|| retransmissions(e))
        .or_else(|| interface_drops(e))
        .or_else(|| saturated_cpu(e))
        .unwrap_or_else(|| {
            verdict(
                Bottleneck::NoClearBottleneck,
                "no limit reached its threshold: no saturated CPU, window, loss or rate limit".into(),
            )
        })
}

/// The run did not complete: nothing else can be trusted, but an outage seen before it ended
/// is said beside the reason (a link that went down is often why).
fn incomplete(e: &Evidence) -> Option<Verdict> {
    let why = e.incomplete.as_ref()?;
    let evidence = match outage(e) {
        Some(o) => format!("{why}; {}", o.evidence),
        None => why.clone(),
    };
    Some(verdict(Bottleneck::Incomplete, evidence))
}

/// The path went away inside the window: an interface without carrier, or stretches with no
/// data at all. Whatever else the figures show (CPU idle, loss, a low rate) follows from it.
fn outage(e: &Evidence) -> Option<Verdict> {
    let carrier = e
        .carrier_lost
        .iter()
        .map(|(host, c)| format!("{} ({host}) lost carrier for {:.1} s at {:.1} s", c.iface, c.seconds, c.at_seconds));
    let silent = e.silences.iter().map(|(from, secs)| format!("no data for {secs:.1} s from {from:.1} s"));
    let said: Vec<String> = carrier.chain(silent).collect();
    (!said.is_empty()).then(|| verdict(Bottleneck::Outage, said.join("; ")))
}

/// UDP datagrams lost beyond [`RETRANS_SHARE`].
fn datagram_loss(e: &Evidence) -> Option<Verdict> {
    // Lost datagrams explain a shortfall better than any limit they fall short of.
    if let Some((lost, expected, rcvbuf_errors)) =
        e.udp_loss.filter(|(l, x, _)| *x > 0 && *l as f64 / *x as f64 >= RETRANS_SHARE)
    {
        let why = if rcvbuf_errors > 0 {
            format!("; the receiver's socket buffer overflowed {rcvbuf_errors} times: the receiver could not keep up (pace the sender with -b/--rate, or add queues)")
        } else {
            String::new()
        };
        return Some(verdict(
            Bottleneck::DatagramLoss,
            format!("{lost} of {expected} datagrams lost ({}){why}", pct(lost as f64 / expected as f64)),
        ));
    }
    None
}

/// The receiver got close to the rate the user set (`-b`/`--rate`, per flow: the evidence
/// carries it over all flows). Named by both spellings: iperf users type `-b`.
fn configured_rate(e: &Evidence) -> Option<Verdict> {
    let got = e.received_bps;
    if e.configured_rate_bps > 0 && got >= RATE_SHARE * e.configured_rate_bps as f64 {
        return Some(verdict(
            Bottleneck::ConfiguredRate,
            format!(
                "-b/--rate set {} in all and {} was received ({} of it)",
                format_bits_per_second(e.configured_rate_bps as f64),
                format_bits_per_second(got),
                pct(got / e.configured_rate_bps as f64)
            ),
        ));
    }
    None
}

/// The receiver got close to a limit configured on the path (qdisc, link speed, cloud cap).
fn path_limit(e: &Evidence) -> Option<Verdict> {
    let got = e.received_bps;
    for limit in &e.path_limits {
        if limit.bits_per_second > 0.0 && got >= RATE_SHARE * limit.bits_per_second {
            let source = limit.source.as_ref().map_or(String::new(), |s| format!("; source: {s}"));
            return Some(verdict(
                Bottleneck::of_limit(limit.kind),
                format!(
                    "{} allows {} and {} was received ({}){source}",
                    limit.what,
                    format_bits_per_second(limit.bits_per_second),
                    format_bits_per_second(got),
                    pct(got / limit.bits_per_second)
                ),
            ));
        }
    }
    None
}

/// TCP waited on the receive window or the send buffer.
fn tcp_waited(e: &Evidence) -> Option<Verdict> {
    let t = &e.tcp;
    if t.flows > 0 && t.rwnd_limited_share() >= TCP_LIMITED_SHARE {
        return Some(verdict(
            Bottleneck::ReceiveWindow,
            format!(
                "senders were limited by the receiver's advertised window {} of their busy time (raise the receiver's buffer: net.ipv4.tcp_rmem, or -w to set SO_RCVBUF on both ends)",
                pct(t.rwnd_limited_share())
            ),
        ));
    }
    if t.flows > 0 && t.sndbuf_limited_share() >= TCP_LIMITED_SHARE {
        return Some(verdict(
            Bottleneck::SendBuffer,
            format!(
                "senders were limited by their send buffer {} of their busy time (raise net.ipv4.tcp_wmem, or -w to set SO_SNDBUF on both ends)",
                pct(t.sndbuf_limited_share())
            ),
        ));
    }
    None
}

/// A saturated CPU whose queue thread got little of it.
fn starved_cpu(e: &Evidence) -> Option<Verdict> {
    // A saturated CPU whose queue thread got little of it: someone else used it (softirq or
    // another process). Checked before loss, because a starved CPU also drops packets.
    for (side, h) in &e.host {
        if h.utilization < CPU_SATURATED {
            continue;
        }
        let Some((_, thread)) = e.threads.iter().find(|(s, t)| s == side && t.cpu == h.cpu) else { continue };
        if thread.utilization >= THREAD_STARVED {
            continue; // the queue thread itself used the CPU: named below
        }
        let softirq_share = h.softirq_seconds / h.busy_seconds.max(1e-9);
        if softirq_share >= 0.5 {
            return Some(verdict(
                Bottleneck::SoftirqBoundCpu,
                format!(
                    "CPU {} of the {side} was {} busy, {} of it in softirq (packet processing); its queue thread got {}",
                    h.cpu,
                    pct(h.utilization),
                    pct(softirq_share),
                    pct(thread.utilization)
                ),
            ));
        }
        return Some(verdict(
            Bottleneck::CpuContention,
            format!(
                "CPU {} of the {side} was {} busy but its queue thread got only {}: other work competes for that CPU",
                h.cpu,
                pct(h.utilization),
                pct(thread.utilization)
            ),
        ));
    }
    None
}

/// TCP retransmitted beyond [`RETRANS_SHARE`] of the bytes.
fn retransmissions(e: &Evidence) -> Option<Verdict> {
    let t = &e.tcp;
    if t.flows > 0 && t.retrans_share() >= RETRANS_SHARE {
        return Some(verdict(
            Bottleneck::Retransmissions,
            format!(
                "{} segments retransmitted, {} of the bytes sent (loss on the path)",
                t.retransmitted_segments,
                pct(t.retrans_share())
            ),
        ));
    }
    None
}

/// Packets dropped by interfaces or softnet backlogs.
fn interface_drops(e: &Evidence) -> Option<Verdict> {
    if e.drops > 0 {
        return Some(verdict(
            Bottleneck::InterfaceDrops,
            format!("{} packets dropped by interfaces or softnet backlogs during the window", e.drops),
        ));
    }
    None
}

/// A saturated CPU or queue thread of either side.
fn saturated_cpu(e: &Evidence) -> Option<Verdict> {
    // A saturated CPU whose queue thread did most of the work (system time includes the
    // kernel's packet processing charged to it), then a saturated thread.
    for (side, h) in &e.host {
        let Some((_, thread)) = e.threads.iter().find(|(s, t)| s == side && t.cpu == h.cpu) else { continue };
        if h.utilization >= CPU_SATURATED && thread.utilization >= THREAD_STARVED {
            return Some(verdict(
                cpu_of(side),
                format!(
                    "CPU {} of the {side} was {} busy: its queue thread {}, softirq {}; more queues or CPUs would help",
                    h.cpu,
                    pct(h.utilization),
                    pct(thread.utilization),
                    pct(h.softirq_seconds / h.busy_seconds.max(1e-9) * h.utilization)
                ),
            ));
        }
    }
    let busiest = e.threads.iter().max_by(|a, b| a.1.utilization.total_cmp(&b.1.utilization));
    if let Some((side, t)) = busiest.filter(|(_, t)| t.utilization >= CPU_SATURATED) {
        let sys = t.system_seconds / (t.user_seconds + t.system_seconds).max(1e-9);
        return Some(verdict(
            cpu_of(side),
            format!(
                "{side} queue thread on CPU {} was {} busy ({} in the kernel): more queues or CPUs would help",
                t.cpu,
                pct(t.utilization),
                pct(sys)
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::figures::{HostCpu, ThreadCpu};
    use crate::sys::netpath::LimitKind;
    use crate::sys::netpath::PathLimit;
    use crate::sys::tcpinfo::TcpWindow;

    fn thread(cpu: usize, utilization: f64) -> ThreadCpu {
        ThreadCpu { cpu, queues: vec![0], user_seconds: 0.1, system_seconds: utilization - 0.1, utilization }
    }
    fn host(cpu: usize, utilization: f64, softirq: f64) -> HostCpu {
        HostCpu { cpu, busy_seconds: utilization, softirq_seconds: softirq, utilization }
    }

    #[test]
    fn nothing_stands_out() {
        let e = Evidence { received_bps: 5e9, ..Default::default() };
        assert_eq!(diagnose(&e).bottleneck, "no clear bottleneck");
    }

    #[test]
    fn configured_rate_wins_over_everything_but_incomplete() {
        let e = Evidence {
            received_bps: 1.98e9,
            configured_rate_bps: 2_000_000_000,
            threads: vec![("sender", thread(0, 0.99))],
            ..Default::default()
        };
        let v = diagnose(&e);
        assert_eq!(v.bottleneck, "configured rate");
        assert!(v.evidence.contains("99%"), "evidence quotes the share: {}", v.evidence);
        let broken = Evidence { incomplete: Some("receiver vanished".into()), ..e };
        assert_eq!(diagnose(&broken).bottleneck, "incomplete");
    }

    #[test]
    fn path_limits_are_named_by_kind() {
        let qdisc =
            PathLimit { kind: LimitKind::Qdisc, what: "qdisc tbf on uba0".into(), bits_per_second: 1e9, source: None };
        let e = Evidence { received_bps: 0.93e9, path_limits: vec![qdisc.clone()], ..Default::default() };
        let v = diagnose(&e);
        assert_eq!(v.bottleneck, "qdisc");
        assert!(v.evidence.contains("tbf") && v.evidence.contains("1.00 Gbits/sec"), "{}", v.evidence);
        let far_below = Evidence { received_bps: 0.3e9, path_limits: vec![qdisc], ..Default::default() };
        assert_eq!(
            diagnose(&far_below).bottleneck,
            "no clear bottleneck",
            "a limit far above the rate is not the limit"
        );
        let cloud = PathLimit {
            kind: LimitKind::CloudCap,
            what: "GCP egress cap for 4 vCPUs".into(),
            bits_per_second: 8e9,
            source: Some("docs".into()),
        };
        let e = Evidence { received_bps: 7.9e9, path_limits: vec![cloud], ..Default::default() };
        assert_eq!(diagnose(&e).bottleneck, "cloud egress cap");
    }

    #[test]
    fn tcp_limits() {
        let rwnd =
            TcpWindow { flows: 1, busy_time_us: 1000, rwnd_limited_us: 600, bytes_sent: 1, ..Default::default() };
        let e = Evidence { received_bps: 1e9, tcp: rwnd, ..Default::default() };
        assert_eq!(diagnose(&e).bottleneck, "receive window");
        let sndbuf = TcpWindow { flows: 1, busy_time_us: 1000, sndbuf_limited_us: 300, ..Default::default() };
        assert_eq!(diagnose(&Evidence { tcp: sndbuf, ..Default::default() }).bottleneck, "send buffer");
        let lossy = TcpWindow {
            flows: 2,
            bytes_sent: 1_000_000,
            bytes_retrans: 50_000,
            retransmitted_segments: 35,
            ..Default::default()
        };
        let v = diagnose(&Evidence { tcp: lossy, ..Default::default() });
        assert_eq!(v.bottleneck, "retransmissions");
        assert!(v.evidence.contains("35 segments"), "{}", v.evidence);
    }

    #[test]
    fn udp_loss_names_the_receiver_buffer() {
        let e = Evidence {
            udp_loss: Some((1400, 10_000, 37)),
            threads: vec![("sender", thread(0, 0.99))],
            ..Default::default()
        };
        let v = diagnose(&e);
        assert_eq!(v.bottleneck, "datagram loss", "{v:?}");
        assert!(v.evidence.contains("14%") && v.evidence.contains("overflowed 37 times"), "{}", v.evidence);
        let paced = Evidence {
            udp_loss: Some((1000, 10_000, 0)),
            received_bps: 0.9e9,
            configured_rate_bps: 1_000_000_000,
            ..Default::default()
        };
        assert_eq!(
            diagnose(&paced).bottleneck,
            "datagram loss",
            "10% loss explains 90% of --rate better than the rate"
        );
        let tiny = Evidence { udp_loss: Some((1, 10_000, 0)), ..Default::default() };
        assert_eq!(diagnose(&tiny).bottleneck, "no clear bottleneck", "0.01% loss is not the limit");
    }

    #[test]
    fn an_outage_comes_before_loss_and_cpu() {
        let lost = crate::metrics::figures::CarrierLoss { iface: "vA".into(), at_seconds: 3.0, seconds: 2.5 };
        let down = Evidence {
            carrier_lost: vec![("this host".into(), lost)],
            silences: vec![(3.0, 2.0)],
            udp_loss: Some((5000, 10_000, 0)),
            threads: vec![("sender", thread(0, 0.45))],
            host: vec![("sender", host(0, 1.0, 0.1))],
            ..Default::default()
        };
        let v = diagnose(&down);
        assert_eq!(v.bottleneck, "outage", "{v:?}");
        assert_eq!(v.evidence, "vA (this host) lost carrier for 2.5 s at 3.0 s; no data for 2.0 s from 3.0 s");
        let quiet = Evidence { silences: vec![(1.0, 1.0)], ..Default::default() };
        assert_eq!(diagnose(&quiet).evidence, "no data for 1.0 s from 1.0 s");
    }

    #[test]
    fn silences_join_consecutive_empty_intervals() {
        use crate::metrics::figures::{silences, IntervalFigures};
        let iv = IntervalFigures::of_bytes;
        let run = [iv(0.0, 5), iv(1.0, 0), iv(2.0, 0), iv(3.0, 7), iv(4.0, 0)];
        assert_eq!(silences(&run), vec![(1.0, 2.0), (4.0, 1.0)]);
        assert!(silences(&[iv(0.0, 0), iv(1.0, 0)]).is_empty(), "a window that moved nothing is no outage in it");
    }

    #[test]
    fn cpu_rules() {
        let contended = Evidence {
            threads: vec![("sender", thread(0, 0.45))],
            host: vec![("sender", host(0, 1.0, 0.1))],
            ..Default::default()
        };
        let v = diagnose(&contended);
        assert_eq!(v.bottleneck, "cpu contention", "{v:?}");
        assert!(v.evidence.contains("CPU 0") && v.evidence.contains("45%"), "{}", v.evidence);
        let softirq = Evidence { host: vec![("sender", host(0, 1.0, 0.7))], ..contended.clone() };
        assert_eq!(diagnose(&softirq).bottleneck, "softirq-bound cpu");
        let bound = Evidence {
            threads: vec![("sender", thread(0, 0.6)), ("receiver", thread(1, 0.97))],
            host: vec![("receiver", host(1, 0.99, 0.0))],
            ..Default::default()
        };
        let v = diagnose(&bound);
        assert_eq!(v.bottleneck, "receiver cpu", "{v:?}");
        assert!(v.evidence.contains("97%"));
        let saturated_host = Evidence {
            threads: vec![("sender", thread(0, 0.9))],
            host: vec![("sender", host(0, 0.99, 0.1))],
            ..Default::default()
        };
        let v = diagnose(&saturated_host);
        assert_eq!(v.bottleneck, "sender cpu", "a saturated CPU mostly used by its queue thread: {v:?}");
        assert!(v.evidence.contains("99% busy"), "{}", v.evidence);
    }

    #[test]
    fn starved_cpu_is_named_before_the_loss_it_causes() {
        let e = Evidence {
            tcp: TcpWindow { flows: 1, bytes_sent: 100, bytes_retrans: 5, ..Default::default() },
            threads: vec![("sender", thread(0, 0.5))],
            host: vec![("sender", host(0, 1.0, 0.1))],
            ..Default::default()
        };
        assert_eq!(diagnose(&e).bottleneck, "cpu contention");
    }

    #[test]
    fn a_queue_on_neither_end_is_placed_on_the_path_between() {
        use crate::metrics::latency::{RttFigures, WorkingLatency};
        use crate::sys::netpath::ReceiverQueues;
        let rtt = |p50_ms| RttFigures { count: 100, p50_ms, p90_ms: p50_ms, p99_ms: p50_ms, max_ms: p50_ms };
        let mut l = WorkingLatency {
            idle: rtt(0.1),
            loaded: rtt(20.1),
            inflation: crate::metrics::latency::Inflation { p50_ms: 20.0, p90_ms: 20.0, p99_ms: 20.0 },
            ..WorkingLatency::default()
        };
        let said = |l: &WorkingLatency| queue_finding(l, &[], Some("vethA"), 100e6).expect("a standing queue");
        assert!(said(&l).contains("a router's or the receiver's queue"), "an older receiver: {}", said(&l));
        let quiet = ReceiverQueues { interface: "vethB".into(), egress_shaper: None, ingress: None };
        l.receiver_queues = Some(quiet.clone());
        assert!(said(&l).contains("not on either end: on the path between"), "{}", said(&l));
        l.receiver_queues = Some(ReceiverQueues { ingress: Some("clsact".into()), ..quiet });
        let s = said(&l);
        assert!(s.contains("the receiver's clsact qdisc on vethB (ingress) could hold it"), "{s}");
        assert!(!s.contains("not on either end"), "{s}");
    }
}
