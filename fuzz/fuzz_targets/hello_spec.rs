//! The hello a sender opens a test with and the receiver's checks of it, in the receiver's
//! order: decode the message, compare the announced UDP ports with the flows, check the spec
//! against the default limits; then, for an accepted spec, what the test derives from it.
//! Asserts that an accepted spec really is within the limits, computed without wrapping.
//! Input starting with `{` is the hello's JSON; other input gives the spec's numbers as raw
//! big-endian fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::base::spec::{Direction, Proto, TestSpec, Workload};
use uringbench::session::control::{ControlMsg, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
use uringbench::session::receiver::ServerLimits;
use uringbench::session::server::TestRunner;
use uringbench::workload::receive::Workloads;

/// CPUs of the pretend receiver: `threads` is the queues it can place, as `recv` computes it.
const CPUS: usize = 16;

/// A hello whose numbers come straight from the input's bytes (a JSON mutator rarely writes
/// 256 queues × 2^24 flows or a warm-up of 2^64 - 1000 ms), sent through JSON as a peer would.
fn binary_hello(data: &[u8]) -> Vec<u8> {
    let mut bytes = data.iter().copied().chain(std::iter::repeat(0));
    let mut take = |n: usize| (0..n).fold(0u64, |acc, _| acc << 8 | u64::from(bytes.next().unwrap_or(0)));
    let shape = take(1);
    let mut spec = TestSpec {
        queues: take(4) as u32,
        flows_per_queue: take(4) as u32,
        time_ms: take(8),
        warmup_ms: take(8),
        cooldown_ms: take(8),
        interval_ms: take(8),
        len: take(4) as u32,
        depth: take(4) as u32,
        rate_bps: take(8),
        req_len: take(4) as u32,
        resp_len: take(4) as u32,
        timeout_ms: take(8),
        ..TestSpec::default()
    };
    spec.proto = if shape & 1 != 0 { Proto::Udp } else { Proto::Tcp };
    spec.direction = [Direction::Forward, Direction::Reverse, Direction::Bidir][(shape >> 1) as usize % 3];
    spec.workload = [Workload::Stream, Workload::Rr, Workload::Crr][(shape >> 3) as usize % 3];
    // Mostly a few ports (fast), sometimes thousands (the receiver's count check).
    let ports = if shape & 0x60 == 0x60 { take(2) as usize % 10_000 } else { take(1) as usize };
    let udp_ports = (0..ports).map(|p| p as u16).collect();
    // The steering requests are flags the receiver acts on after admission; both ways here.
    let (steer_udp, steer_ntuple) = (shape & 0x80 != 0, take(1) & 1 != 0);
    serde_json::to_vec(&ControlMsg::Hello { version: PROTOCOL_VERSION, spec, udp_ports, steer_udp, steer_ntuple })
        .expect("a hello encodes")
}

fuzz_target!(|data: &[u8]| {
    // Text starting with '{' is a hello as a peer wrote it; anything else is made into one.
    let built;
    let data = if data.first() == Some(&b'{') {
        data
    } else {
        built = binary_hello(data);
        &built
    };
    let Ok(ControlMsg::Hello { version, spec, udp_ports, .. }) = serde_json::from_slice::<ControlMsg>(data) else {
        return;
    };
    // The versions the receiver accepts (a sender without --psk-file says 2, as the seeds
    // captured from real senders do).
    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
        return;
    }
    // The receiver's second check (session::server's admission): a UDP test announces one
    // source port per data connection, or is refused.
    let connections = spec.data_connections();
    if spec.proto == Proto::Udp && udp_ports.len() != connections as usize {
        return;
    }
    let threads = (spec.queues as usize).min(CPUS);
    let limits = ServerLimits::default();
    let memory = Workloads { xdp: None }.memory(&spec, threads);
    if limits.check(&spec, memory).is_err() {
        return;
    }
    let flows = u128::from(spec.queues) * u128::from(spec.flows_per_queue);
    assert!(flows <= u128::from(limits.max_flows), "{flows} flows accepted");
    assert!(spec.queues <= limits.max_queues && spec.queues > 0);
    assert!(memory <= limits.max_memory, "a test of {memory} bytes accepted");
    let total = u128::from(spec.warmup_ms) + u128::from(spec.time_ms) + u128::from(spec.cooldown_ms);
    assert!(total <= u128::from(limits.max_total_ms), "a {total} ms test accepted");
    assert_eq!(u128::from(spec.flows()), flows, "flows() of an accepted spec is exact");
    let per_direction = if spec.direction == Direction::Bidir { 2 } else { 1 };
    let expected = if spec.workload == Workload::Crr { 0 } else { flows * per_direction };
    assert_eq!(u128::from(connections), expected, "data_connections() of an accepted spec is exact");
    if spec.proto == Proto::Udp {
        assert_eq!(udp_ports.len() as u128, expected, "an accepted UDP test has a port per connection");
    }
    assert_eq!(spec.total().as_millis(), total);
    for flow in 0..spec.flows() {
        assert!(spec.queue_of_flow(flow) < spec.queues);
    }
    let shares: u128 = (0..spec.flows()).filter_map(|f| spec.tuning.flow_bytes(f, spec.flows())).map(u128::from).sum();
    if let Some(bytes) = spec.tuning.bytes {
        assert_eq!(shares, u128::from(bytes), "byte shares add up to -n");
    }
    // The window's sample offsets: increasing, from warm-up to the window's end.
    let mut last = None;
    for at in spec.sample_offsets().take(1_000) {
        assert!(last.is_none_or(|l| at > l), "offsets increase");
        assert!(at.as_millis() <= u128::from(spec.warmup_ms) + u128::from(spec.time_ms));
        last = Some(at);
    }
});
