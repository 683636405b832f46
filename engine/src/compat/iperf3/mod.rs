//! iperf3 compatibility: uringbench against an unmodified iperf3 (3.9 and later; tested with
//! 3.12), one side at a time. The wire formats are in [`crate::wire::iperf3`], the data moves
//! through the stream workload's loops.
//!
//! - [`client`]: `send --iperf3`, our sender to `iperf3 -s`, reported as a native
//!   [`crate::metrics::figures::StreamReport`] with the iperf3 server's results as the
//!   receiver side.
//! - [`server`]: `recv --iperf3`, `iperf3 -c` clients served one test at a time behind the
//!   accept gate.

pub mod auth;
pub mod client;
mod control;
pub mod server;
mod udp;

pub use auth::{ClientAuth, RsaPadding, ServerAuth};
pub use client::{params_for, run_send, run_send_as, run_send_asking, Iperf3Asks, Iperf3Report};
pub use server::{bind_receiver, serve, Iperf3Event, Iperf3EventSink, Iperf3TestSummary, ServerOutput};

use crate::base::spec::TestSpec;
use crate::metrics::figures::{Role, SideReport};
use crate::wire::iperf3::{stream_id, Results, StreamResult};

/// Our side's results as iperf3 shows them at the other end: for each `(side, first_id)`,
/// per flow what it sent or received (after the omitted start, as iperf3 counts), under
/// iperf3 stream ids from `first_id`; a sending stream's retransmits; our threads' CPU.
///
/// Each stream's `end_time` is the span our own clock measured its bytes over: without an
/// omitted start they are the whole test's, so the span is `test_seconds` where the caller
/// timed the test (`recv --iperf3`: TEST_RUNNING to the client's TEST_END, as a stock server
/// reports); otherwise, and with an omitted start (the bytes are then the window's), the side's
/// window.
fn our_results(spec: &TestSpec, sides: [(Option<&SideReport>, usize); 2], test_seconds: Option<f64>) -> Results {
    let secs = sides.iter().filter_map(|(s, _)| s.map(|s| s.window_seconds)).fold(0.0, f64::max);
    let (user, system) = sides
        .iter()
        .filter_map(|(s, _)| *s)
        .flat_map(|s| &s.cpu.threads)
        .fold((0.0, 0.0), |(u, s), t| (u + t.user_seconds, s + t.system_seconds));
    let pct = |x: f64| if secs > 0.0 { 100.0 * x / secs } else { 0.0 };
    // Without an omitted start, everything, as iperf3 counts its own side.
    let whole_test = spec.warmup_ms == 0;
    let mut streams = Vec::new();
    for (side, first_id) in sides {
        let Some(side) = side else { continue };
        for flow in 0..spec.flows() {
            let q = spec.queue_of_flow(flow) as usize;
            let retransmits = (side.role == Role::Sender)
                .then(|| {
                    side.tcp_flows_end.get(flow as usize).and_then(|i| i.as_ref()).map(|i| u64::from(i.total_retrans))
                })
                .flatten();
            streams.push(StreamResult {
                id: stream_id(first_id + flow as usize),
                bytes: side.queues.get(q).map_or(0, |q| if whole_test { q.total_bytes } else { q.bytes }),
                retransmits,
                end_s: test_seconds.filter(|_| whole_test).unwrap_or(side.window_seconds),
                ..StreamResult::default()
            });
        }
    }
    let sends = sides.iter().any(|(s, _)| s.is_some_and(|s| s.role == Role::Sender));
    Results {
        cpu_util: [pct(user + system), pct(user), pct(system)],
        sender_has_retransmits: sends.then_some(true),
        congestion_used: spec.tuning.congestion.clone(),
        streams,
        ..Results::default()
    }
}
