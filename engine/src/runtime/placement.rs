//! Which CPU each queue runs on, and whether its thread may spin.
//!
//! A queue thread busy-polls only when it has a CPU of its own. We never put two
//! worker threads of one test on the same CPU: when queues outnumber CPUs, one thread per CPU
//! serves several queues on one ring (a sleeping thread per queue would cost a context switch
//! per wakeup, which is what makes iperf2 at -P 16 on few cores measure itself).

use crate::base::error::{Error, Result};
use crate::sys::affinity::allowed_cpus;
use crate::sys::memory_node;
use crate::uring::fastpath::FastPaths;
use crate::uring::ring::WaitMode;
use serde::{Deserialize, Serialize};

/// What the user asked for with `--busy-poll`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BusyPoll {
    Auto,
    On,
    Off,
}

/// One worker thread: the CPU it is pinned to and the queues it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadPlan {
    pub cpu: usize,
    pub queues: Vec<u32>,
}

/// The threads of one side of a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    pub threads: Vec<ThreadPlan>,
    pub wait: WaitMode,
    /// The run's fast paths: every queue thread builds its ring with their ring part.
    #[serde(skip)]
    pub fast: FastPaths,
    /// One human line: what was chosen and why.
    pub summary: String,
}

impl Placement {
    /// The CPUs the queue threads are pinned to (what a side thread, such as the latency
    /// probe, keeps off).
    pub fn cpus(&self) -> Vec<usize> {
        self.threads.iter().map(|t| t.cpu).collect()
    }
}

/// Default spin window of adaptive busy polling: long enough to bridge the gap between
/// completions of a busy stream, short enough to cost little when a flow goes idle.
pub(crate) const ADAPTIVE_SPIN_US: u32 = 50;

/// Places `queues` queues (at least one: a validated spec's) on `cpus`, their threads using the fast paths `fast`. `shared` says the CPUs are also used by another test
/// running on this process, in which case nobody spins. `latency_bound` says the workload
/// waits on each completion (request/response): only then does `auto` spin.
///
/// Why `auto` does not spin for bulk streams: on the veth pair a spinning receiver kept its
/// CPU ~90% busy for the same or lower throughput than a sleeping one woken per batch of
/// completions (16 queues: ~14-17 vs ~23-25 Gbit/s, and twice the CPU-seconds per GB).
pub fn plan(
    queues: u32,
    cpus: &[usize],
    busy: BusyPoll,
    shared: bool,
    latency_bound: bool,
    fast: &FastPaths,
) -> Result<Placement> {
    if cpus.is_empty() {
        return Err(Error::usage("no CPU available for the queue threads (check --cpus and taskset)"));
    }
    let nthreads = (queues as usize).min(cpus.len());
    let mut threads: Vec<ThreadPlan> =
        cpus[..nthreads].iter().map(|&cpu| ThreadPlan { cpu, queues: Vec::new() }).collect();
    for q in 0..queues {
        threads[q as usize % nthreads].queues.push(q);
    }
    let wait = match (busy, shared) {
        (BusyPoll::Off, _) | (BusyPoll::Auto, true) => WaitMode::Sleep,
        (BusyPoll::Auto, false) if !latency_bound => WaitMode::Sleep,
        (BusyPoll::On, true) => {
            return Err(Error::usage(
                "--busy-poll on refused: another test is running on the same CPUs, spinning threads would steal each other's time",
            ))
        }
        (BusyPoll::On, false) => WaitMode::Spin,
        (BusyPoll::Auto, false) => WaitMode::Adaptive { spin_us: ADAPTIVE_SPIN_US },
    };
    let cpu_list: Vec<String> = threads.iter().map(|t| t.cpu.to_string()).collect();
    let mut summary = format!(
        "{} queue{} on {} thread{} (CPU {}), {}",
        queues,
        plural(queues as usize),
        nthreads,
        plural(nthreads),
        cpu_list.join(","),
        wait.describe()
    );
    if queues as usize > cpus.len() {
        summary.push_str(&format!(
            "; {} queues share {} CPU{}: one thread per CPU serves several queues",
            queues,
            cpus.len(),
            plural(cpus.len())
        ));
    }
    if shared {
        summary.push_str("; CPUs shared with another running test or the other direction, so no spinning");
    } else if busy == BusyPoll::Auto && !latency_bound {
        summary.push_str(" (auto: bulk streams sleep, spinning would take CPU from the kernel)");
    }
    if let Some(paths) = fast.describe() {
        summary.push_str("; ");
        summary.push_str(&paths);
    }
    Ok(Placement { threads, wait, fast: fast.clone(), summary })
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Resolves `--cpus`: the user's list, which must lie inside the allowed set, or the allowed set.
pub(crate) fn resolve_cpus(requested: Option<&[usize]>) -> Result<Vec<usize>> {
    let allowed = allowed_cpus();
    match requested {
        None => Ok(allowed),
        Some(list) => {
            if let Some(bad) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(Error::usage(format!(
                    "CPU {bad} in --cpus is not available to this process (allowed: {})",
                    allowed.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
                )));
            }
            Ok(list.to_vec())
        }
    }
}

/// Pins the calling thread to `cpu`, then has it allocate from that CPU's NUMA node, so the
/// ring and buffers it builds next are local to it (see [`memory_node`]). A refused memory
/// policy leaves the process's own: that costs locality, not correctness.
pub(crate) fn pin_current_thread(cpu: usize) -> Result<()> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        let _ = memory_node::allocate_locally();
        Ok(())
    } else {
        Err(Error::io(format!("pinning a queue thread to CPU {cpu}"), std::io::Error::last_os_error()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_per_queue_when_cpus_suffice() {
        let p = plan(2, &[4, 5, 6], BusyPoll::Auto, false, true, &FastPaths::default()).unwrap();
        assert_eq!(p.threads, vec![ThreadPlan { cpu: 4, queues: vec![0] }, ThreadPlan { cpu: 5, queues: vec![1] }]);
        assert!(matches!(p.wait, WaitMode::Adaptive { .. }), "own CPU, latency-bound: adaptive spinning");
        let bulk = plan(2, &[4, 5, 6], BusyPoll::Auto, false, false, &FastPaths::default()).unwrap();
        assert_eq!(bulk.wait, WaitMode::Sleep, "auto never spins for bulk streams");
        assert!(bulk.summary.contains("auto: bulk streams sleep"), "and says why: {}", bulk.summary);
        assert_eq!(
            plan(2, &[4, 5], BusyPoll::On, false, false, &FastPaths::default()).unwrap().wait,
            WaitMode::Spin,
            "on means on"
        );
    }

    #[test]
    fn more_queues_than_cpus_never_share_a_cpu_between_threads() {
        let p = plan(16, &[1], BusyPoll::Auto, false, false, &FastPaths::default()).unwrap();
        assert_eq!(p.threads.len(), 1, "one thread per CPU");
        assert_eq!(p.threads[0].queues.len(), 16, "that thread serves all 16 queues");
        assert!(p.summary.contains("16 queues share 1 CPU"), "summary says what was chosen: {}", p.summary);
        let p = plan(5, &[0, 1], BusyPoll::On, false, false, &FastPaths::default()).unwrap();
        assert_eq!(p.threads[0].queues, vec![0, 2, 4]);
        assert_eq!(p.threads[1].queues, vec![1, 3]);
    }

    #[test]
    fn shared_cpus_do_not_spin() {
        assert_eq!(plan(1, &[0], BusyPoll::Auto, true, true, &FastPaths::default()).unwrap().wait, WaitMode::Sleep);
        assert!(
            plan(1, &[0], BusyPoll::On, true, true, &FastPaths::default()).is_err(),
            "explicit spinning on shared CPUs is refused"
        );
        assert_eq!(plan(1, &[0], BusyPoll::Off, false, true, &FastPaths::default()).unwrap().wait, WaitMode::Sleep);
    }
}
