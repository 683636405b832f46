//! What the receiver reports per NIC queue after a test: where each flow arrived (its NAPI id
//! and CPU, read from its socket), the receive queue that means, and the per-queue table with
//! the misalignments it shows.

use super::*;

/// What the receiver learnt of one flow after it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowArrival {
    pub flow: u32,
    /// The sender's address and port as this side sees them.
    pub peer: SocketAddr,
    /// This side's address and port.
    pub local: SocketAddr,
    /// SO_INCOMING_NAPI_ID (0 or None: unknown).
    pub napi_id: Option<u32>,
    /// SO_INCOMING_CPU: where its last packet was processed.
    pub cpu: Option<usize>,
    /// The engine queue (and so the thread) that served it.
    pub engine_queue: u32,
    pub bytes: u64,
}

impl FlowArrival {
    /// Flow `flow` as its socket tells it (addresses, NAPI id, incoming CPU), served by
    /// `engine_queue`; None for a socket without a peer.
    pub(crate) fn read(flow: u32, socket: &impl std::os::fd::AsFd, engine_queue: u32, bytes: u64) -> Option<Self> {
        use std::os::fd::AsRawFd;
        let sock = socket2::SockRef::from(socket);
        let fd = socket.as_fd().as_raw_fd();
        Some(Self {
            flow,
            peer: sock.peer_addr().ok()?.as_socket()?,
            local: sock.local_addr().ok()?.as_socket()?,
            napi_id: crate::sys::sockopt::incoming_napi_id(fd),
            cpu: crate::sys::sockopt::incoming_cpu(fd),
            engine_queue,
            bytes,
        })
    }
}

/// The receive queue a socket's packets arrive on: by its NAPI id where the kernel names each
/// queue's, else by the CPU that processed them when exactly one receive queue's IRQ lands
/// there.
pub(crate) fn landed_queue(topo: &NicTopology, napi_id: Option<u32>, cpu: Option<usize>) -> Option<u32> {
    napi_id.filter(|&n| n != 0).and_then(|n| topo.rx_queue_of_napi(n)).or_else(|| {
        let cpu = cpu?;
        let mut on_cpu = topo.rx.iter().filter(|q| q.irq_cpus.first() == Some(&cpu));
        let q = on_cpu.next()?;
        on_cpu.next().is_none().then_some(q.queue)
    })
}

/// The per-queue table of a receiver's test and the misalignments it shows: which flows
/// landed on which receive queue (by NAPI id), where the queue's IRQ and the flow's thread
/// ran, and what the receiver's hash predicted.
/// `polled`: each thread's (CPU, receive completions, completions found by polling).
pub fn queue_table(
    tq: &TestQueues,
    placement: &Placement,
    flows: &[FlowArrival],
    polled: &[(usize, u64, u64)],
) -> NicQueueTable {
    let topo = &tq.topology;
    let thread_cpu_of = |engine_queue: u32| -> Option<usize> {
        placement.threads.iter().find(|t| t.queues.contains(&engine_queue)).map(|t| t.cpu)
    };
    let steer = tq.steering();
    let map = RssMap { key: &steer.key, table: &steer.indirection };
    let predict = steer.unusable().is_none();
    let empty_row = |queue: u32| {
        let info = topo.rx.iter().find(|q| q.queue == queue);
        NicQueueRow {
            rx_queue: queue,
            napi_id: info.and_then(|q| q.napi_id),
            irq: info.and_then(|q| q.irq),
            irq_cpu: topo.rx_irq_cpu(queue),
            thread_cpus: Vec::new(),
            numa_node: topo.numa_node,
            flows: Vec::new(),
            bytes: 0,
            thread_completions: 0,
            polled_completions: 0,
        }
    };
    let mut rows: BTreeMap<u32, NicQueueRow> = BTreeMap::new();
    let mut findings = Vec::new();
    let mut landed_of = Vec::new();
    for f in flows {
        let napi = f.napi_id.filter(|&n| n != 0);
        let landed = landed_queue(topo, f.napi_id, f.cpu);
        let predicted = predict.then(|| map.queue_of(f.peer, f.local, true)).flatten();
        let Some(queue) = landed.or(predicted) else {
            continue;
        };
        landed_of.push((f.flow, queue));
        // The NIC put a flow elsewhere than the key and table it reports say: steering by
        // source port cannot work on it. Compared with the hash of the flow's own ports, not
        // with its target, so unsteered flows (`--steer off`) are not reported as missed.
        if let (Some(landed), Some(hashed)) = (landed, predicted) {
            if landed != hashed {
                findings.push(format!(
                    "flow {} landed on rx queue {landed}, but its ports hash to rx queue {hashed} by the NIC's reported key and table",
                    f.flow
                ));
            }
        }
        let row = rows.entry(queue).or_insert_with(|| empty_row(queue));
        row.flows.push(f.flow);
        row.bytes += f.bytes;
        if row.napi_id.is_none() && landed.is_some() {
            row.napi_id = napi;
        }
        if let Some(cpu) = thread_cpu_of(f.engine_queue) {
            if !row.thread_cpus.contains(&cpu) {
                row.thread_cpus.push(cpu);
            }
        }
    }
    for &q in &tq.nic_queue {
        rows.entry(q).or_insert_with(|| empty_row(q));
    }
    for row in rows.values_mut() {
        for &(_, completions, by_polling) in polled.iter().filter(|(cpu, _, _)| row.thread_cpus.contains(cpu)) {
            row.thread_completions += completions;
            row.polled_completions += by_polling;
        }
    }
    let served: Vec<u32> = {
        let mut s = tq.nic_queue.clone();
        s.sort_unstable();
        s.dedup();
        s
    };
    let idle = served.iter().filter(|q| rows.get(q).is_none_or(|r| r.flows.is_empty())).count();
    for row in rows.values() {
        // Flows sharing a queue while a served queue sits idle: steering could have split them.
        if row.flows.len() > 1 && idle > 0 {
            findings.push(format!("flows {} share rx queue {}", join_and(&row.flows), row.rx_queue));
        }
        if tq.mode == PlacementMode::Irq {
            if let Some(irq_cpu) = row.irq_cpu {
                for &cpu in row.thread_cpus.iter().filter(|&&c| c != irq_cpu) {
                    findings.push(format!("IRQ of queue {} on CPU {irq_cpu}, its thread on CPU {cpu}", row.rx_queue));
                }
            }
        }
    }
    // Steered and handed off, each thread's sockets share one NAPI id: a thread that serves
    // flows of several rx queues polls packets processed on other CPUs.
    let mut thread_rows: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for row in rows.values().filter(|r| r.napi_id.is_some()) {
        for &cpu in &row.thread_cpus {
            thread_rows.entry(cpu).or_default().push(row.rx_queue);
        }
    }
    for (cpu, queues) in thread_rows.iter().filter(|(_, q)| q.len() > 1) {
        findings.push(format!("thread on CPU {cpu} serves flows of rx queues {}", join_and(queues)));
    }
    if let Some(node) = topo.numa_node {
        let mut off: Vec<usize> =
            placement.threads.iter().map(|t| t.cpu).filter(|c| !topo.node_cpus.contains(c)).collect();
        off.dedup();
        if !off.is_empty() && !topo.node_cpus.is_empty() {
            findings.push(format!("threads on CPUs {off:?} are off node {node}, the NIC's"));
        }
    }
    let occupied = rows.values().filter(|r| !r.flows.is_empty()).count();
    NicQueueTable {
        iface: topo.iface.clone(),
        placement: tq.mode.name().to_string(),
        summary: format!(
            "{} flows on {occupied} of {} served rx queues{}",
            landed_of.len(),
            served.len(),
            if topo.rx.iter().any(|q| q.napi_id.is_some()) {
                " (by each socket's NAPI id)"
            } else if flows.iter().any(|f| f.cpu.is_some()) && landed_of.len() == flows.len() {
                " (by the CPU each socket's packets were processed on, its queue's IRQ CPU)"
            } else {
                " (as the receiver's hash predicts, where it could)"
            }
        ),
        rows: rows.into_values().collect(),
        findings,
    }
}

/// `3 and 7`, `1, 4 and 9`.
pub(crate) fn join_and(flows: &[u32]) -> String {
    let names: Vec<String> = flows.iter().map(u32::to_string).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}
