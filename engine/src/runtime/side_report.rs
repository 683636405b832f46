//! A side's report, assembled from what its queue threads and flows did over the window.

use crate::base::spec::TestSpec;
use crate::metrics::data_path::DataPath;
use crate::metrics::figures::{
    CpuFigures, HostCpu, QueueFigures, Role, SideReport, ThreadCpu, ZeroCopyFigures, ENDED_EARLY,
};
use crate::metrics::measure::{Sample, Window};
use crate::runtime::placement::ThreadPlan;
use crate::sys::hostinfo::HostDelta;
use crate::sys::tcpinfo::TcpWindow;
use crate::transport::tcp::send::ZeroCopyCounts;
use crate::transport::FlowOutcome;

impl SideReport {
    /// Builds a side's report from its window's first and last samples and its flows'
    /// outcomes. Intervals are not in it: they went to the sampler's sink, and whoever kept
    /// them puts them in `intervals`.
    pub fn build(
        role: Role,
        spec: &TestSpec,
        window: &Window,
        outcomes: &[FlowOutcome],
        threads: &[(ThreadPlan, i32)],
    ) -> Self {
        let nq = spec.queues as usize;
        let mut queues: Vec<QueueFigures> =
            (0..nq).map(|q| QueueFigures { id: q as u32, bytes: 0, total_bytes: 0, flows: 0 }).collect();
        for o in outcomes {
            let q = &mut queues[o.queue as usize];
            q.total_bytes += o.bytes;
            q.flows += 1;
        }
        let mut errors: Vec<String> = Vec::new();
        for o in outcomes.iter().filter_map(|o| o.error.as_ref()) {
            if !errors.contains(o) {
                errors.push(o.clone());
            }
        }
        let window_complete = window.complete;
        let mut window_seconds = 0.0;
        let intervals = Vec::new();
        let mut tcp = TcpWindow::default();
        let mut host = None;
        let mut cpu = CpuFigures { nominal_hz: crate::metrics::measure::nominal_cpu_hz(), ..CpuFigures::default() };
        if let (Some(first), Some(last)) = (window.first.as_ref(), window.last.as_ref()) {
            window_seconds = (last.at - first.at).as_secs_f64();
            for (q, fig) in queues.iter_mut().enumerate() {
                fig.bytes = last.bytes[q] - first.bytes[q];
            }
            cpu = cpu_figures(first, last, window_seconds, threads, cpu.nominal_hz);
            tcp = TcpWindow::between(&first.tcp, &last.tcp);
            tcp.rtt_max_us = tcp.rtt_max_us.max(window.rtt_max_us);
            host = first.host.as_ref().zip(last.host.as_ref()).map(|(a, b)| HostDelta::between(a, b));
        }
        // With `-n` the test ends when the bytes are delivered, before the planned window.
        let ends_by_bytes = spec.tuning.bytes.is_some();
        if !window_complete && !ends_by_bytes {
            errors.push(ENDED_EARLY.into());
        }
        let complete = (window_complete || ends_by_bytes) && errors.is_empty();
        Self {
            role,
            placement: String::new(),
            path: String::new(),
            data_path: None,
            queues,
            window_seconds,
            intervals,
            cpu,
            tcp,
            tcp_flows_end: Vec::new(),
            flow_sockets: Vec::new(),
            host,
            udp: None,
            zerocopy: None,
            xdp: None,
            nic_queues: None,
            mptcp: Vec::new(),
            carrier_lost: window.carrier_lost.clone(),
            data_began_unix_ns: None,
            complete,
            errors,
        }
    }

    /// Sets the data path and its line (an AF_XDP side's line leads with its socket figures).
    pub(crate) fn set_data_path(&mut self, path: DataPath) {
        self.path = match &self.xdp {
            Some(xdp) => format!("{}, {path}", xdp.describe()),
            None => path.to_string(),
        };
        self.data_path = Some(path);
    }

    /// Appends each of `notes` to the path text, after a "; ".
    /// Records the MPTCP flows' subflows (`None`: a test without `-m`), with a line per
    /// connection in the path notes. Call after `set_data_path`, which rewrites the path.
    pub(crate) fn set_mptcp(&mut self, conns: Option<Vec<crate::sys::mptcp::MptcpConnection>>) {
        let Some(conns) = conns else { return };
        let sending = self.role == Role::Sender;
        let mut notes = crate::sys::mptcp::describe(&conns, sending);
        if conns.is_empty() {
            notes.push("MPTCP: the kernel gave no MPTCP_INFO for these flows (plain TCP sockets)".into());
        } else if conns.iter().any(|c| !c.fallback) {
            // TCP_INFO on an MPTCP socket answers for its first subflow.
            notes.push("MPTCP: the flows' TCP_INFO figures are their first subflow's".into());
        }
        self.add_path_notes(notes);
        self.mptcp = conns;
    }

    pub(crate) fn add_path_notes(&mut self, notes: impl IntoIterator<Item = String>) {
        for note in notes {
            self.path.push_str("; ");
            self.path.push_str(&note);
        }
    }

    pub(crate) fn set_zerocopy(&mut self, requested: &str, used: bool, reason: String, counts: &ZeroCopyCounts) {
        self.zerocopy = Some(ZeroCopyFigures {
            requested: requested.into(),
            used,
            reason,
            sends: counts.sends,
            notifications: counts.notifications,
            copied: counts.copied,
        });
    }
}

fn cpu_figures(
    first: &Sample,
    last: &Sample,
    window: f64,
    threads: &[(ThreadPlan, i32)],
    nominal_hz: Option<f64>,
) -> CpuFigures {
    let window = window.max(1e-9);
    let threads = threads
        .iter()
        .filter_map(|(plan, tid)| {
            let (user, system) = first.cpu.thread_seconds(&last.cpu, *tid)?;
            Some(ThreadCpu {
                cpu: plan.cpu,
                queues: plan.queues.clone(),
                user_seconds: user,
                system_seconds: system,
                utilization: (user + system) / window,
            })
        })
        .collect();
    let host: Vec<HostCpu> = first
        .cpu
        .host_deltas(&last.cpu)
        .into_iter()
        .map(|d| HostCpu {
            cpu: d.cpu,
            busy_seconds: d.busy_seconds,
            softirq_seconds: d.softirq_seconds,
            utilization: d.busy_share,
        })
        .collect();
    let host_busy_seconds = host.iter().map(|h| h.busy_seconds).sum();
    CpuFigures { threads, host, host_busy_seconds, nominal_hz }
}
