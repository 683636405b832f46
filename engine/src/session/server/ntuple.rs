//! `send --steer ntuple` on the receiver: one ethtool n-tuple flow rule per data flow, putting
//! it on the receive queue of its engine queue, for NICs whose hash a source port cannot steer
//! (not Toeplitz, or a key the driver does not report). Each rule is recorded in a settings
//! journal as soon as the driver has given its slot, and the journal is reverted when the test
//! ends (and by the forced-exit path, or `uringbench settings revert --state FILE` after a
//! crash), so no rule outlives its test.

use std::net::{IpAddr, SocketAddr};

use crate::base::error::Result;
use crate::runtime::nic_queues::{RssSteering, TestQueues};
use crate::sys::ntuple::{insert_rule, ntuple_unsupported, FlowRule, RX_CLS_LOC_ANY};
use crate::sys::settings::{default_state, register, Journal, SharedJournal};

/// A test's n-tuple rules: where they go, and the journal that removes them.
pub(crate) struct NtupleRules {
    iface: String,
    steering: RssSteering,
    journal: SharedJournal,
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
        let state = default_state(&format!("ntuple-{}-test{id}", std::process::id()));
        let journal = Journal::append_to(&state, "n-tuple rules of a uringbench recv test (--steer ntuple)")
            .map_err(|e| format!("--steer ntuple: {}", e.message))?;
        Ok(Self { iface, steering: queues.steering(), journal: register(journal) })
    }

    /// Installs one rule per flow (index, the sender's address, this side's address): its
    /// packets go to the receive queue of engine queue `flow % engine_queues`. Returns the
    /// line the receiver's report carries.
    pub(super) fn install(
        &self,
        engine_queues: u32,
        flows: &[(u32, SocketAddr, SocketAddr)],
        udp: bool,
    ) -> Result<String> {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let mut placed = Vec::new();
        for &(flow, src, dst) in flows {
            let queue = self.steering.target_of_flow(engine_queues, flow);
            let rule = FlowRule { udp, src, dst, queue, location: RX_CLS_LOC_ANY };
            let location = insert_rule(&self.iface, &rule)?;
            journal.record_ntuple_rule(&self.iface, location)?;
            placed.push(format!("{flow}→rx {queue}"));
        }
        Ok(format!("flows steered by n-tuple rules on {} (removed at the end): {}", self.iface, placed.join(", ")))
    }
}

/// The test's end: its rules are removed.
impl Drop for NtupleRules {
    fn drop(&mut self) {
        let _ = self.journal.lock().unwrap_or_else(|p| p.into_inner()).revert();
    }
}
