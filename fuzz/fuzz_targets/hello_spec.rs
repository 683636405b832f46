//! The hello a sender opens a test with and the receiver's checks of it, in the receiver's
//! order: decode the message, compare the announced UDP ports with the flows, check the spec
//! against the default limits; then, for an accepted spec, what the test derives from it.
//! Asserts that an accepted spec really is within the limits, computed without wrapping.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::session::control::{ControlMsg, PROTOCOL_VERSION};
use uringbench::session::server::{ServerLimits, TestRunner};
use uringbench::workload::receive::Workloads;

/// CPUs of the pretend receiver: `threads` is the queues it can place, as `recv` computes it.
const CPUS: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Ok(ControlMsg::Hello { version, spec, udp_ports }) = serde_json::from_slice::<ControlMsg>(data) else {
        return;
    };
    if version != PROTOCOL_VERSION {
        return;
    }
    let _ = udp_ports.len() == spec.data_connections() as usize;
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
    for at in spec.sample_offsets().take(10_000) {
        assert!(last.is_none_or(|l| at > l), "offsets increase");
        assert!(at.as_millis() <= u128::from(spec.warmup_ms) + u128::from(spec.time_ms));
        last = Some(at);
    }
});
