//! `--steer ntuple` on the receiver: one ethtool n-tuple flow rule per data flow, putting
//! it on the receive queue of its engine queue, for NICs whose hash a source port cannot steer
//! (not Toeplitz, or a key the driver does not report); TCP and UDP streams alike. And
//! `recv --zc-rx IFACE`: one rule per flow putting it on the zero-copy queue of the thread
//! that serves it, queues RSS never hashes a flow to. Each rule is recorded in a settings
//! journal as soon as the driver has given its slot, and the journal is reverted when the test
//! ends (and by the forced-exit path, or `uringbench settings revert --state FILE` after a
//! crash), so no rule outlives its test.

use std::net::{IpAddr, SocketAddr};

use crate::base::error::Result;
use crate::runtime::nic_queues::{RssSteering, TestQueues};
use crate::runtime::placement::ThreadPlan;
use crate::sys::ntuple::{insert_rule, ntuple_unsupported, FlowRule, RX_CLS_LOC_ANY};
use crate::sys::settings::{default_state, register, Journal, SharedJournal};
use crate::uring::zcrx::ZcRx;

/// A test's n-tuple rules: where they go, and the journal that removes them.
pub(crate) struct NtupleRules {
    iface: String,
    targets: Targets,
    journal: SharedJournal,
}

/// Where a test's rules put its flows.
enum Targets {
    /// `--steer ntuple`: flow `f` on the receive queue of engine queue `f % queues`.
    Rss(RssSteering),
    /// `--zc-rx IFACE`: each flow on the zero-copy queue of the thread that serves it.
    ZeroCopy(ZcRx),
}

impl NtupleRules {
    /// The rules of test `id` served toward `peer`, or the one-line reason the receiver
    /// cannot make them (the refusal the sender prints).
    pub(super) fn for_test(
        queues: Option<&TestQueues>,
        peer: Option<IpAddr>,
        id: u64,
    ) -> std::result::Result<Self, String> {
        let iface = match (queues, peer) {
            (Some(q), _) => q.topology.iface.clone(),
            (None, Some(ip)) => crate::sys::hostinfo::route_to(ip)
                .map(|r| r.ifname)
                .map_err(|e| format!("--steer ntuple: no interface toward the sender ({})", e.message))?,
            (None, None) => return Err("--steer ntuple: the sender's address is unknown".into()),
        };
        if let Some(why) = ntuple_unsupported(&iface) {
            return Err(format!("--steer ntuple: {why}"));
        }
        let Some(queues) = queues else {
            return Err(format!("--steer ntuple: {iface} has no receive queues with interrupts to steer flows to"));
        };
        let journal = open_journal(id, "--steer ntuple").map_err(|e| format!("--steer ntuple: {e}"))?;
        Ok(Self { iface, targets: Targets::Rss(queues.steering()), journal })
    }

    /// The rules of test `id` whose flows `zc` receives zero-copy from queues kept out of RSS;
    /// `recv` checked at start that the NIC takes such rules.
    pub(super) fn for_zero_copy(zc: &ZcRx, id: u64) -> std::result::Result<Self, String> {
        if let Some(why) = ntuple_unsupported(&zc.iface) {
            return Err(format!("--zc-rx {}: the flows cannot be put on its queues: {why}", zc.iface));
        }
        let journal = open_journal(id, "--zc-rx").map_err(|e| format!("--zc-rx {}: {e}", zc.iface))?;
        Ok(Self { iface: zc.iface.clone(), targets: Targets::ZeroCopy(zc.clone()), journal })
    }

    /// The receive queue of each of `flows`, in order (None: a flow no rule can place): its
    /// engine queue's (of `engine_queues`) or, with zero-copy receive, its thread's (of
    /// `threads`) zero-copy queue.
    pub(super) fn targets(&self, engine_queues: u32, flows: &[u32], threads: &[ThreadPlan]) -> Vec<Option<u32>> {
        match &self.targets {
            Targets::Rss(steering) => flows.iter().map(|&f| Some(steering.target_of_flow(engine_queues, f))).collect(),
            Targets::ZeroCopy(zc) => zc_targets(engine_queues, flows, threads, zc),
        }
    }

    /// Installs one rule per flow (index, the sender's address, this side's address, its
    /// receive queue). Returns the line the receiver's report carries.
    pub(super) fn install(&self, flows: &[(u32, SocketAddr, SocketAddr, u32)], udp: bool) -> Result<String> {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let mut placed = Vec::new();
        for rule in plan(flows, udp) {
            let location = insert_rule(&self.iface, &rule)?;
            journal.record_ntuple_rule(&self.iface, location)?;
            placed.push(rule.queue);
        }
        let what = match self.targets {
            Targets::Rss(_) => "flows steered",
            Targets::ZeroCopy(_) => "flows put on their zero-copy receive queues (kept out of RSS)",
        };
        Ok(describe(what, &self.iface, flows.iter().map(|f| f.0).zip(placed)))
    }
}

/// The journal of test `id`'s rules (`why`: the option that makes them).
fn open_journal(id: u64, why: &str) -> std::result::Result<SharedJournal, String> {
    let state = default_state(&format!("ntuple-{}-test{id}", std::process::id()));
    let journal = Journal::append_to(&state, &format!("n-tuple rules of a uringbench recv test ({why})"))
        .map_err(|e| e.message)?;
    Ok(register(journal))
}

/// The zero-copy receive queue each of `flows` must be put on: the flow's engine queue (flow
/// `f` of `engine_queues`: `f % engine_queues`, as the receiving side deals them when rules
/// place the flows), the thread whose plan serves that engine queue, and that thread's queue.
pub(crate) fn zc_targets(engine_queues: u32, flows: &[u32], threads: &[ThreadPlan], zc: &ZcRx) -> Vec<Option<u32>> {
    flows
        .iter()
        .map(|&f| {
            let queue = f % engine_queues.max(1);
            let thread = threads.iter().position(|t| t.queues.contains(&queue))?;
            zc.queue_of_thread(thread as u32)
        })
        .collect()
}

/// The rules for `flows` (index, source, destination, receive queue), matching every field
/// of the 4-tuple of a TCP or (`udp`) UDP flow, the slot left to the driver.
fn plan(flows: &[(u32, SocketAddr, SocketAddr, u32)], udp: bool) -> Vec<FlowRule> {
    flows.iter().map(|&(_, src, dst, queue)| FlowRule { udp, src, dst, queue, location: RX_CLS_LOC_ANY }).collect()
}

/// The report's line: `flows steered by n-tuple rules on eth0 (removed at the end): 0→rx 0, ...`.
fn describe(what: &str, iface: &str, placed: impl Iterator<Item = (u32, u32)>) -> String {
    let pairs: Vec<String> = placed.map(|(flow, queue)| format!("{flow}→rx {queue}")).collect();
    format!("{what} by n-tuple rules on {iface} (removed at the end): {}", pairs.join(", "))
}

/// The test's end: its rules are removed.
impl Drop for NtupleRules {
    fn drop(&mut self) {
        let _ = self.journal.lock().unwrap_or_else(|p| p.into_inner()).revert();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::zcrx::ZcQueues;

    fn threads(plans: &[&[u32]]) -> Vec<ThreadPlan> {
        plans.iter().enumerate().map(|(cpu, q)| ThreadPlan { cpu, queues: q.to_vec() }).collect()
    }

    #[test]
    fn zero_copy_flows_go_to_the_queue_of_the_thread_that_serves_them() {
        // 8 rx queues, the table covering 0..=5: queues 6 and 7 for two receiving threads.
        let zc =
            ZcRx { iface: "eth1".into(), ifindex: 3, queues: ZcQueues::OutOfRss { queues: vec![6, 7], rx_queues: 8 } };
        // -P 2, 3 flows a queue: flows 0, 2, 4 on engine queue 0 (thread 0), 1, 3, 5 on 1.
        let two = threads(&[&[0], &[1]]);
        assert_eq!(
            zc_targets(2, &[0, 1, 2, 3, 4, 5], &two, &zc),
            [6, 7, 6, 7, 6, 7].map(Some).to_vec(),
            "flow f on thread f % 2's queue"
        );
        // 4 engine queues on 2 threads (fewer CPUs): thread 0 serves 0 and 2, thread 1 serves 1 and 3.
        let shared = threads(&[&[0, 2], &[1, 3]]);
        assert_eq!(zc_targets(4, &[0, 1, 2, 3], &shared, &zc), [6, 7, 6, 7].map(Some).to_vec());
        // A thread past the chosen queues has none (the session refuses such a test first).
        let three = threads(&[&[0], &[1], &[2]]);
        assert_eq!(zc_targets(3, &[2], &three, &zc), vec![None]);
        // IFACE:QUEUE: thread i on QUEUE + i.
        let fixed = ZcRx { iface: "eth1".into(), ifindex: 3, queues: ZcQueues::From(4) };
        assert_eq!(zc_targets(3, &[0, 1, 2, 5], &three, &fixed), [4, 5, 6, 6].map(Some).to_vec());
    }

    #[test]
    fn udp_and_tcp_flows_get_rules_matching_their_four_tuple() {
        let src: SocketAddr = "10.77.0.1:40001".parse().unwrap();
        let dst: SocketAddr = "10.77.0.2:5300".parse().unwrap();
        let rules = plan(&[(0, src, dst, 3), (1, SocketAddr::new(src.ip(), 40002), dst, 1)], true);
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0], FlowRule { udp: true, src, dst, queue: 3, location: RX_CLS_LOC_ANY });
        assert_eq!((rules[1].src.port(), rules[1].queue, rules[1].udp), (40002, 1, true));
        assert!(!plan(&[(0, src, dst, 0)], false)[0].udp);
        let line = describe("flows steered", "eth0", [(0, 3), (1, 1)].into_iter());
        assert_eq!(line, "flows steered by n-tuple rules on eth0 (removed at the end): 0→rx 3, 1→rx 1");
    }
}
