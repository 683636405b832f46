//! The engine as a library: a program that runs a test can cancel it through its
//! [`StopToken`] and still gets the report of what ran, and a receiver it serves can be ended
//! the same way. Real TCP traffic on loopback, through the engine's front door only.

use std::sync::Arc;
use std::time::{Duration, Instant};
use uringbench::runtime::placement::BusyPoll;
use uringbench::{
    bind, run_send, serve, KernelCaps, Proto, ReceiverConfig, SendOptions, ServerEvent, StopToken, TestSpec, Workloads,
};

/// A receiver on an ephemeral loopback port, served on a thread of its own until `stop`.
fn receiver(stop: &StopToken) -> (u16, std::thread::JoinHandle<uringbench::Result<bool>>) {
    let cfg = ReceiverConfig {
        bind: "127.0.0.1".parse().unwrap(),
        port: 0,
        busy_poll: BusyPoll::Off,
        stop: stop.clone(),
        ..ReceiverConfig::new(KernelCaps::detect().expect("io_uring on the test host"))
    };
    let listener = bind(&cfg).expect("bind a loopback receiver");
    let port = listener.local_addr().unwrap().port();
    let events = Arc::new(|_: ServerEvent| {});
    let runner = Arc::new(Workloads::default());
    (port, std::thread::spawn(move || serve(cfg, runner, listener, events)))
}

fn options(port: u16, proto: Proto, stop: &StopToken) -> SendOptions {
    SendOptions {
        target: "127.0.0.1".into(),
        port,
        spec: TestSpec {
            proto,
            len: if proto == Proto::Udp { 1470 } else { 128 * 1024 },
            time_ms: 20_000,
            warmup_ms: 0,
            rate_bps: 200_000_000,
            ..TestSpec::default()
        },
        cpus: None,
        busy_poll: BusyPoll::Off,
        local: Default::default(),
        fast: Default::default(),
        kernel: KernelCaps::detect().expect("io_uring on the test host"),
        psk: None,
        stop: stop.clone(),
    }
}

/// Runs a 20 s test, cancels it after 1.5 s from another thread, and checks the partial
/// report: cut short for the caller's reason, both ends' byte counts agreeing.
fn cancel_mid_test(proto: Proto) {
    let server_stop = StopToken::new();
    let (port, server) = receiver(&server_stop);
    let stop = StopToken::new();
    let canceller = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            stop.stop("cancelled by the caller")
        })
    };
    let started = Instant::now();
    let report = run_send(&options(port, proto, &stop)).expect("the test starts and reports");
    let took = started.elapsed();
    assert!(canceller.join().unwrap(), "the canceller's stop was the first");
    assert!(took < Duration::from_secs(6), "a cancelled 20 s test returns within seconds, took {took:?}");
    let interrupted = report.interrupted.as_ref().expect("the report says it was interrupted");
    assert_eq!(interrupted.reason, "cancelled by the caller on the sender");
    assert!(interrupted.at_seconds > 0.5 && interrupted.at_seconds < 5.0, "{interrupted:?}");
    assert_eq!(interrupted.of_seconds, 20.0);
    assert!(!report.complete(), "a cancelled test is not complete");
    let receiver = report.receiver.as_ref().expect("the receiver's figures for the part that ran");
    assert!(receiver.total_bytes() > 0, "bytes moved before the cancel");
    if proto == Proto::Tcp {
        // TCP delivers every byte written; the receiver counted what the sender wrote.
        assert_eq!(receiver.total_bytes(), report.sender.total_bytes());
    } else {
        assert!(receiver.total_bytes() <= report.sender.total_bytes());
    }
    // The receiver is unharmed by the cancelled test, and stops when its own token does.
    assert!(!server.is_finished(), "the receiver still serves");
    server_stop.stop("the test program is done");
    let served = server.join().unwrap().expect("serve returns once stopped");
    assert!(served, "a stopped receiver reports success");
}

#[test]
fn a_cancelled_tcp_send_returns_its_partial_report() {
    cancel_mid_test(Proto::Tcp);
}

#[test]
fn a_cancelled_udp_send_returns_its_partial_report() {
    cancel_mid_test(Proto::Udp);
}

#[test]
fn a_token_stopped_before_the_test_ends_it_at_once() {
    let server_stop = StopToken::new();
    let (port, server) = receiver(&server_stop);
    let stop = StopToken::new();
    stop.stop("cancelled before the start");
    let started = Instant::now();
    let report = run_send(&options(port, Proto::Tcp, &stop)).expect("the test is agreed, then ends");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(
        report.interrupted.as_ref().map(|i| i.reason.as_str()),
        Some("cancelled before the start on the sender")
    );
    server_stop.stop("done");
    assert!(server.join().unwrap().unwrap());
}
