//! What the AF_XDP engine's two sending halves share (the socket sender of
//! [`crate::workload::xdp_stream`] and the live-frames generator of
//! [`crate::workload::xdp_live`]): the flows dealt to their queues, and the side's report.

use crate::base::spec::TestSpec;
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{SideReport, UdpFigures};
use crate::metrics::xdp::XdpFigures;
use crate::runtime::side::halves::Indexed;
use crate::runtime::side::{SideRun, TestSide};
use crate::transport::xdp::send::{XdpFlowSent, XdpSendFlow};
use crate::transport::FlowOutcome;

/// A sender's flows grouped by the test queue they are counted under (one list per queue).
pub(crate) fn flows_by_queue(spec: &TestSpec, flows: Vec<Indexed<XdpSendFlow>>) -> Vec<Vec<XdpSendFlow>> {
    let mut per_queue: Vec<Vec<XdpSendFlow>> = (0..spec.queues).map(|_| Vec::new()).collect();
    for (_, flow) in flows {
        per_queue[flow.queue as usize].push(flow);
    }
    per_queue
}

/// The report of an AF_XDP-engine sending side: what its flows sent, beside `figures`.
pub(crate) fn sender_report<R>(
    side: &TestSide,
    run: &SideRun<R>,
    flows: &[&XdpFlowSent],
    figures: XdpFigures,
    len: u32,
) -> SideReport {
    let outcomes: Vec<FlowOutcome> =
        flows.iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.bytes, error: f.error.clone() }).collect();
    let mut sender = side.report(run, &outcomes);
    sender.udp = Some(UdpFigures { datagrams: flows.iter().map(|f| f.datagrams).sum(), ..UdpFigures::default() });
    sender.xdp = Some(figures);
    sender.set_data_path(DataPath::XdpSend { len });
    sender
}
