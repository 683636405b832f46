//! What `recv` runs once it has admitted a test: each workload's serving side, handed to the
//! accept loop ([`crate::session::server`]) as a [`TestRunner`].

use crate::base::error::Result;
use crate::base::spec::{Direction, Proto, TestSpec, Workload};
use crate::session::control::{self, ControlMsg};
use crate::session::server::{Reports, Test, TestRunner};
use crate::transport::tcp::crr as tcp_crr;
use crate::uring::ring::BufRing;
use crate::workload::rr::{self, ServerFlows};
use crate::workload::stream::{self, RECV_BUF_COUNT, RECV_BUF_SIZE};
use crate::workload::udp_stream;
use crate::workload::xdp_stream::{XdpOptions, XdpReception};

/// The receiver's workloads, with its engine choice.
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    /// `--engine xdp`: forward UDP tests are received with AF_XDP sockets and uringbench's XDP
    /// program instead of UDP sockets.
    pub xdp: Option<XdpOptions>,
}

impl TestRunner for Workloads {
    fn memory(&self, _spec: &TestSpec, threads: usize) -> u64 {
        threads as u64 * (RECV_BUF_COUNT as u64 * RECV_BUF_SIZE as u64 + BufRing::pinned_bytes(RECV_BUF_COUNT))
    }

    fn udp_alone(&self) -> bool {
        self.xdp.is_some()
    }

    fn run(&self, test: &mut Test<'_>) -> Result<Reports> {
        let spec = test.spec;
        if spec.workload == Workload::Crr {
            let local = test
                .ctl
                .local_addr()
                .map_err(|e| crate::base::error::Error::io("reading the control socket address", e))?;
            let steer: Vec<(usize, u32)> = test.placement.threads.iter().map(|t| (t.cpu, t.queues[0])).collect();
            let (listeners, port, spread) = tcp_crr::listeners(local.ip().to_canonical(), spec.queues, &steer)?;
            test.accept(Some(port))?;
            return rr::serve_rr(test.ctl, spec, ServerFlows::Crr(listeners, spread), test.placement)
                .map(|r| (Some(r), None));
        }
        if let Some(xdp) = self.xdp.as_ref().filter(|_| {
            spec.proto == Proto::Udp && spec.workload == Workload::Stream && spec.direction == Direction::Forward
        }) {
            // Program and sockets first, so the sender's first frames find them; a failure
            // refuses the test with its reason (and whatever was set up is undone).
            let reception = match XdpReception::prepare(test.ctl, test.udp_ports, xdp) {
                Ok(r) => r,
                Err(e) => {
                    let _ = control::write_msg(test.ctl, &ControlMsg::Refuse { reason: e.message.clone() });
                    return Err(e);
                }
            };
            test.accept(None)?;
            return reception.serve(test.ctl, spec, test.placement).map(|r| (Some(r), None));
        }
        if spec.proto == Proto::Udp {
            // Sockets first, so the sender's first datagrams find them (with GRO on).
            let sockets = udp_stream::receiver_sockets(test.ctl, test.udp_ports)?;
            test.accept(None)?;
            if spec.workload == Workload::Rr {
                return rr::serve_rr(test.ctl, spec, ServerFlows::Udp(sockets), test.placement)
                    .map(|r| (Some(r), None));
            }
            return udp_stream::serve_udp(test.ctl, spec, sockets, test.placement);
        }
        let flows = test.accept_flows()?;
        if spec.workload == Workload::Rr {
            return rr::serve_rr(test.ctl, spec, ServerFlows::Tcp(flows), test.placement).map(|r| (Some(r), None));
        }
        stream::serve_test(test.ctl, spec, flows, test.placement, test.caps)
    }
}
