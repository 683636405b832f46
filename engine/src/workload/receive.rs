//! What `recv` runs once it has admitted a test: each workload's serving side, handed to the
//! accept loop ([`crate::session::server`]) as a [`TestRunner`].

use crate::base::error::Result;
use crate::base::spec::{Direction, Proto, TestSpec, Workload};
use crate::session::control::{self, ControlMsg};
use crate::session::server::{ServedReports, Test, TestRunner};
use crate::transport::probe;
use crate::transport::tcp::crr as tcp_crr;
use crate::uring::ring::BufRing;
use crate::workload::rr::{self, ServerFlows};
use crate::workload::stream::{self, RECV_BUF_COUNT, RECV_BUF_SIZE};
use crate::workload::udp_stream::{self, UDP_RCVBUF};
use crate::workload::xdp_stream::{XdpOptions, XdpReception};

/// The receiver's workloads, with its engine choice.
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    /// `--engine xdp`: forward UDP tests are received with AF_XDP sockets and uringbench's XDP
    /// program instead of UDP sockets.
    pub xdp: Option<XdpOptions>,
}

impl TestRunner for Workloads {
    fn memory(&self, spec: &TestSpec, threads: usize) -> u64 {
        test_memory(spec, threads)
    }

    fn udp_alone(&self) -> bool {
        self.xdp.is_some()
    }

    fn run(&self, test: &mut Test<'_>) -> Result<ServedReports> {
        let spec = test.spec;
        if spec.workload == Workload::Crr {
            let local = test
                .ctl
                .local_addr()
                .map_err(|e| crate::base::error::Error::io("reading the control socket address", e))?;
            let steer: Vec<(usize, u32)> = test.placement.threads.iter().map(|t| (t.cpu, t.queues[0])).collect();
            // An MPTCP crr test gets MPTCP listeners where this kernel has MPTCP.
            let mptcp = spec.tuning.mptcp && test.caps.mptcp_unavailable.is_none();
            let protocol = crate::sys::mptcp::StreamProtocol::of(mptcp);
            let (listeners, port, spread) =
                tcp_crr::listeners(local.ip().to_canonical(), spec.queues, &steer, protocol)?;
            test.accept(Some(port))?;
            return rr::serve_rr(test.ctl, test.stop, spec, ServerFlows::Crr(listeners, spread), test.placement)
                .map(ServedReports::received);
        }
        if let Some(xdp) = self.xdp.as_ref().filter(|_| {
            spec.proto == Proto::Udp && spec.workload == Workload::Stream && spec.direction == Direction::Forward
        }) {
            // The XDP program takes every datagram to the port: the probe's would never
            // reach a socket that answers it.
            let prepared = if test.steered_by_rules() {
                Err(crate::base::error::Error::unsupported(
                    "--steer ntuple: recv --engine xdp receives UDP with its XDP program, which installs no n-tuple rules: run the test without --steer ntuple, or recv without --engine xdp",
                ))
            } else if spec.latency {
                Err(crate::base::error::Error::unsupported(
                    "recv --engine xdp does not answer --latency probes: run the test without --latency, or recv without --engine xdp",
                ))
            } else {
                XdpReception::prepare(test.ctl, test.udp_ports, xdp)
            };
            // Program and sockets first, so the sender's first frames find them; a failure
            // refuses the test with its reason (and whatever was set up is undone).
            let reception = match prepared {
                Ok(r) => r,
                Err(e) => {
                    let _ = control::write_msg(test.ctl, &ControlMsg::Refuse { reason: e.message.clone() });
                    return Err(e);
                }
            };
            test.accept(None)?;
            return reception.serve(test.ctl, test.stop, spec, test.placement).map(ServedReports::received);
        }
        if spec.proto == Proto::Udp {
            // Sockets first, so the sender's first datagrams find them (with GRO on). A sender
            // that steers its data flows' source ports names them after the accept; it keeps
            // the latency probe's, whose responder must be up before the accept.
            let follow = test.udp_ports_follow();
            let data = spec.data_connections() as usize;
            let known = if follow { &test.udp_ports[data..] } else { test.udp_ports };
            let mut sockets = udp_stream::receiver_sockets(test.ctl, known)?;
            // `--latency`: the socket after the last flow's answers the probe for the whole
            // test; `ready` waits until the sender has measured the idle path.
            let _answering = match spec.latency.then(|| sockets.pop()).flatten() {
                Some(s) => Some(
                    probe::answer_udp(s, &test.placement.cpus())
                        .map_err(|e| crate::base::error::Error::io("starting the latency probe's responder", e))?,
                ),
                None => None,
            };
            if follow {
                let ports = test.accept_udp_ports()?;
                sockets = udp_stream::receiver_sockets(test.ctl, &ports)?;
            } else {
                test.accept(None)?;
            }
            if _answering.is_some() {
                std::thread::sleep(probe::IDLE_PHASE);
            }
            if spec.workload == Workload::Rr {
                return rr::serve_rr(test.ctl, test.stop, spec, ServerFlows::Udp(sockets), test.placement)
                    .map(ServedReports::received);
            }
            // `--steer ntuple`: each flow's socket names its source port; the rules are in
            // before `ready` lets the sender start.
            let by_rules = if spec.direction == Direction::Forward { test.steer_udp_by_rules(&sockets)? } else { None };
            let mut served = udp_stream::serve_udp(test.ctl, test.stop, spec, sockets, test.placement, test.queues)?;
            if let Some(report) = served.received.as_mut() {
                report.add_path_notes(by_rules);
            }
            return Ok(served);
        }
        let flows = test.accept_flows()?;
        if spec.workload == Workload::Rr {
            return rr::serve_rr(test.ctl, test.stop, spec, ServerFlows::Tcp(flows), test.placement)
                .map(ServedReports::received);
        }
        let by_rules = test.steer_by_rules(&flows)?;
        let mut served = stream::serve_test(test.ctl, test.stop, spec, flows, test.placement, test.queues, test.caps)?;
        if let Some(report) = served.received.as_mut() {
            report.add_path_notes(by_rules);
        }
        Ok(served)
    }
}

/// Bytes of one interval's figures per flow as they travel and wait to be sent (TCP_INFO
/// figures, counters; measured: about 600 bytes a flow in a report's JSON).
const SAMPLE_BYTES_PER_FLOW: u64 = 640;

/// What a test of `spec` may make this receiver allocate, at most, on `threads` threads:
/// each thread's receive buffers and their ring, the socket buffers it sets (the kernel
/// doubles what is asked: `-w` on both buffers of every TCP flow, the forced UDP receive
/// buffer of every receiving UDP socket), and the interval samples in flight. Saturating:
/// a crafted spec comes out as too much, never as a small wrapped number.
pub(crate) fn test_memory(spec: &TestSpec, threads: usize) -> u64 {
    let per_thread = u64::from(RECV_BUF_COUNT) * u64::from(RECV_BUF_SIZE) + BufRing::pinned_bytes(RECV_BUF_COUNT);
    let rings = (threads as u64).saturating_mul(per_thread);
    let sockets = u64::from(spec.data_connections().max(spec.flows()));
    let receiving = if spec.direction == Direction::Reverse { 0 } else { u64::from(spec.flows()) };
    let forced = match spec.proto {
        Proto::Tcp => spec.tuning.window.map_or(0, |w| 4 * u64::from(w)).saturating_mul(sockets),
        Proto::Udp => receiving.saturating_mul(2 * UDP_RCVBUF as u64),
    };
    // The receiver keeps no interval once sent; a slow sender lets a few queue up.
    let intervals_queued = if spec.interval_ms == 0 { 2 } else { 64 };
    let samples = SAMPLE_BYTES_PER_FLOW.saturating_mul(sockets.saturating_add(1)).saturating_mul(intervals_queued);
    rings.saturating_add(forced).saturating_add(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::receiver::ServerLimits;

    #[test]
    fn memory_counts_forced_socket_buffers_and_saturates() {
        let limits = ServerLimits::default();
        let plain = TestSpec::default();
        assert!(limits.check(&plain, test_memory(&plain, 1)).is_ok(), "a default test fits");
        // One hello asking for 4 x 256 UDP flows: 1,024 sockets with a forced 16 MiB buffer.
        let udp = TestSpec { proto: Proto::Udp, len: 1470, queues: 4, flows_per_queue: 256, ..plain.clone() };
        let reason = limits.check(&udp, test_memory(&udp, 4)).unwrap_err();
        assert!(reason.starts_with("test needs 327"), "over 32 GiB: {reason}");
        let windows = TestSpec {
            queues: 64,
            flows_per_queue: 16,
            tuning: crate::base::spec::Tuning { window: Some(1 << 31), ..Default::default() },
            ..plain
        };
        assert!(test_memory(&windows, 64) > 1 << 40, "8 GiB per flow x 1,024 flows");
        let huge = TestSpec { queues: u32::MAX, flows_per_queue: u32::MAX, ..windows };
        assert_eq!(test_memory(&huge, usize::MAX), u64::MAX, "saturates, never wraps");
    }
}
