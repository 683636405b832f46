use super::*;
use crate::metrics::figures::{Role, UdpFigures};
use crate::metrics::measure::Window;
use crate::transport::FlowOutcome;

/// A side that moved `bytes` in a window of `seconds`.
fn side(role: Role, spec: &TestSpec, bytes: u64, seconds: f64, complete: bool) -> SideReport {
    let outcomes = [FlowOutcome { queue: 0, bytes, error: None }];
    let window = Window { complete, ..Window::default() };
    let mut s = SideReport::build(role, spec, &window, &outcomes, &[]);
    for q in &mut s.queues {
        q.bytes = q.total_bytes;
    }
    s.window_seconds = seconds;
    s.complete = complete;
    s
}

fn peer(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 9, 0, last], 40000))
}

/// The value of the sample `line_start` (its name and labels) in an exposition.
fn value(text: &str, line_start: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' ').map(str::to_string))
}

#[test]
fn tests_are_counted_by_outcome_and_each_sender_keeps_its_last() {
    let x = MetricsExporter::new(2);
    let tcp = TestSpec::default();
    let ok = side(Role::Receiver, &tcp, 1_250_000_000, 1.0, true);
    x.ended(peer(1), &tcp, TestOutcome::Reports { received: Some(&ok), sent: None, sender_retransmits: None });
    let broken = side(Role::Receiver, &tcp, 500, 1.0, false);
    x.ended(peer(2), &tcp, TestOutcome::Reports { received: Some(&broken), sent: None, sender_retransmits: None });
    x.ended(peer(2), &tcp, TestOutcome::Failed("flows never came"));
    x.refused(peer(3));
    let text = x.render();
    assert!(text.ends_with("# EOF\n"));
    assert_eq!(value(&text, "uringbench_tests_total{outcome=\"complete\"}").as_deref(), Some("1"));
    assert_eq!(value(&text, "uringbench_tests_total{outcome=\"incomplete\"}").as_deref(), Some("1"));
    assert_eq!(value(&text, "uringbench_tests_total{outcome=\"failed\"}").as_deref(), Some("1"));
    assert_eq!(value(&text, "uringbench_tests_refused_total").as_deref(), Some("1"));
    assert_eq!(value(&text, "uringbench_received_bytes_total").as_deref(), Some("1250000500"));
    // 1.25 GB in 1 s: 10 Gbit/s, exactly as the report computes it.
    let rate = value(&text, "uringbench_last_test_received_bits_per_second{sender=\"10.9.0.1\"}").unwrap();
    assert_eq!(rate.parse::<f64>().unwrap(), ok.bits_per_second());
    assert_eq!(rate, "10000000000");
    // Sender 2's last test failed: its info says so, and it has no rate.
    assert!(text.contains("sender=\"10.9.0.2\",proto=\"tcp\",workload=\"stream\",direction=\"forward\",queues=\"1\",outcome=\"failed\",verdict=\"incomplete\"} 1"), "{text}");
    assert!(value(&text, "uringbench_last_test_received_bits_per_second{sender=\"10.9.0.2\"}").is_none());
    // A third sender pushes out the oldest: at most two are kept.
    x.ended(peer(4), &tcp, TestOutcome::Reports { received: Some(&ok), sent: None, sender_retransmits: None });
    let text = x.render();
    assert_eq!(value(&text, "uringbench_last_test_senders").as_deref(), Some("2"));
    assert!(!text.contains("10.9.0.1\""), "the oldest sender is gone: {text}");
    assert!(text.contains("10.9.0.2\"") && text.contains("10.9.0.4\""));
}

#[test]
fn udp_loss_and_what_the_receiver_sent_are_shown() {
    let x = MetricsExporter::new(DEFAULT_MAX_SENDERS);
    let udp = TestSpec { proto: Proto::Udp, len: 1400, ..TestSpec::default() };
    let mut r = side(Role::Receiver, &udp, 1_400_000, 1.0, true);
    r.udp = Some(UdpFigures { datagrams: 1000, lost: 10, expected: 1010, ..UdpFigures::default() });
    x.ended(peer(1), &udp, TestOutcome::Reports { received: Some(&r), sent: None, sender_retransmits: None });
    let reverse = TestSpec { direction: Direction::Reverse, ..TestSpec::default() };
    let mut s = side(Role::Sender, &reverse, 4096, 1.0, true);
    s.tcp.retransmitted_segments = 3;
    x.ended(peer(2), &reverse, TestOutcome::Reports { received: None, sent: Some(&s), sender_retransmits: None });
    let text = x.render();
    assert_eq!(value(&text, "uringbench_last_test_lost_datagrams{sender=\"10.9.0.1\"}").as_deref(), Some("10"));
    let ratio: f64 = value(&text, "uringbench_last_test_loss_ratio{sender=\"10.9.0.1\"}").unwrap().parse().unwrap();
    assert!((ratio - 10.0 / 1010.0).abs() < 1e-12);
    assert!(text.contains("proto=\"udp\""));
    assert_eq!(value(&text, "uringbench_last_test_retransmitted_segments{sender=\"10.9.0.2\"}").as_deref(), Some("3"));
    assert_eq!(value(&text, "uringbench_sent_bytes_total").as_deref(), Some("4096"));
    assert!(value(&text, "uringbench_last_test_received_bits_per_second{sender=\"10.9.0.2\"}").is_none());
}

#[test]
fn a_forward_tests_retransmits_come_from_the_senders_end_report() {
    let x = MetricsExporter::new(DEFAULT_MAX_SENDERS);
    let tcp = TestSpec::default();
    let r = side(Role::Receiver, &tcp, 1_000_000, 1.0, true);
    // 10% of the bytes sent again: the receiver's verdict names it.
    let lossy =
        SenderRetransmits { flows: 1, retransmitted_segments: 70, bytes_sent: 1_000_000, bytes_retrans: 100_000 };
    x.ended(peer(1), &tcp, TestOutcome::Reports { received: Some(&r), sent: None, sender_retransmits: Some(lossy) });
    // A sender without the report: no figure rather than a zero.
    x.ended(peer(2), &tcp, TestOutcome::Reports { received: Some(&r), sent: None, sender_retransmits: None });
    let text = x.render();
    assert_eq!(value(&text, "uringbench_last_test_retransmitted_segments{sender=\"10.9.0.1\"}").as_deref(), Some("70"));
    assert!(text.contains("sender=\"10.9.0.1\",proto=\"tcp\",workload=\"stream\",direction=\"forward\",queues=\"1\",outcome=\"complete\",verdict=\"retransmissions\"} 1"), "{text}");
    assert!(value(&text, "uringbench_last_test_retransmitted_segments{sender=\"10.9.0.2\"}").is_none());
}
