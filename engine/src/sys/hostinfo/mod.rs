//! Facts about the host and the network path that the bottleneck verdict needs.
//!
//! A throughput figure alone does not say what held it back. The verdict line and
//! `doctor` need to know which interface carries the test ([`route`]), what that
//! interface is ([`ifstats::LinkInfo`]), whether a shaper caps it ([`qdisc`]), whether the
//! host dropped or retransmitted on the way ([`ifstats`], [`snmp`], [`softnet`]), and whether
//! a cloud vendor meters the VM's egress ([`cloud`]).
//!
//! Every source has a pure parser, tested against text or netlink replies captured on a real
//! kernel, and a thin reader for the live system. Readers see the caller's network namespace
//! (except softnet, which is per CPU and global): take snapshots from inside the namespace
//! the test's sockets live in.
//!
//! [`HostSnapshot`] gathers the counters at one instant, best-effort (what cannot be read is
//! None, never an error), and [`HostDelta`] is what changed over the measured window, ready
//! for the JSON report.

pub mod cloud;
pub mod ifstats;
pub mod neigh;
pub mod qdisc;
pub mod route;
pub mod snmp;
pub mod softnet;

use std::time::Instant;

use serde::Serialize;

pub use cloud::{egress_cap, Cloud, Dmi, EgressCap};
pub use ifstats::{IfCounters, LinkInfo};
pub use qdisc::{ingress_qdisc, root_rate_limit, QdiscLimit};
pub use route::{route_to, Route};
pub use snmp::SnmpCounters;
pub use softnet::{SoftnetCounters, SoftnetTotals};

/// The host's counters at one instant.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HostSnapshot {
    /// The interface whose counters were read.
    pub iface: String,
    #[serde(skip)]
    pub at: Instant,
    /// /sys/class/net/IF/statistics; None if the interface is not in this namespace.
    pub interface: Option<IfCounters>,
    /// /proc/net/snmp of this namespace.
    pub snmp: Option<SnmpCounters>,
    /// /proc/net/softnet_stat, one entry per online CPU.
    pub softnet: Option<Vec<SoftnetCounters>>,
}

impl HostSnapshot {
    /// Reads everything it can; a source that cannot be read is None.
    pub fn take(iface: &str) -> Self {
        Self {
            iface: iface.to_owned(),
            at: Instant::now(),
            interface: IfCounters::read(iface).ok(),
            snmp: SnmpCounters::read().ok(),
            softnet: softnet::read().ok(),
        }
    }
}

/// What changed between two snapshots.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HostDelta {
    pub iface: String,
    /// Time between the snapshots.
    pub seconds: f64,
    /// None if either snapshot lacks it, or they are of different interfaces.
    pub interface: Option<IfCounters>,
    pub snmp: Option<SnmpCounters>,
    /// Per CPU, for the CPUs online in both snapshots.
    pub softnet: Option<Vec<SoftnetCounters>>,
    /// `softnet` summed over CPUs.
    pub softnet_total: Option<SoftnetTotals>,
}

impl HostDelta {
    /// What changed from `before` to `after`.
    pub fn between(before: &HostSnapshot, after: &HostSnapshot) -> Self {
        let interface = match (&before.interface, &after.interface) {
            (Some(b), Some(a)) if before.iface == after.iface => Some(IfCounters::delta(b, a)),
            _ => None,
        };
        let snmp = before.snmp.as_ref().zip(after.snmp.as_ref()).map(|(b, a)| SnmpCounters::delta(b, a));
        let softnet =
            before.softnet.as_deref().zip(after.softnet.as_deref()).map(|(b, a)| softnet::delta_per_cpu(b, a));
        Self {
            iface: after.iface.clone(),
            seconds: after.at.saturating_duration_since(before.at).as_secs_f64(),
            interface,
            snmp,
            softnet_total: softnet.as_deref().map(softnet::sum),
            softnet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn snapshot(iface: &str, at: Instant, rx: u64, retrans: u64, processed: u32) -> HostSnapshot {
        HostSnapshot {
            iface: iface.into(),
            at,
            interface: Some(IfCounters { rx_bytes: rx, ..Default::default() }),
            snmp: Some(SnmpCounters { tcp_retrans_segs: retrans, ..Default::default() }),
            softnet: Some(vec![
                SoftnetCounters { cpu: 0, processed, dropped: 0, time_squeeze: 0 },
                SoftnetCounters { cpu: 1, processed: 2 * processed, dropped: 1, time_squeeze: 0 },
            ]),
        }
    }

    #[test]
    fn delta_of_two_snapshots() {
        let t0 = Instant::now();
        let before = snapshot("hia0", t0, 1000, 2, 10);
        let after = snapshot("hia0", t0 + Duration::from_millis(1500), 5000, 7, 30);
        let d = HostDelta::between(&before, &after);
        assert_eq!(d.seconds, 1.5);
        assert_eq!(d.interface.unwrap().rx_bytes, 4000);
        assert_eq!(d.snmp.unwrap().tcp_retrans_segs, 5);
        assert_eq!(d.softnet_total, Some(SoftnetTotals { processed: 20 + 40, dropped: 0, time_squeeze: 0 }));
    }

    #[test]
    fn missing_parts_and_changed_interface_give_none() {
        let t0 = Instant::now();
        let mut before = snapshot("hia0", t0, 1000, 2, 10);
        let after = snapshot("hib0", t0, 5000, 7, 30);
        before.snmp = None;
        let d = HostDelta::between(&before, &after);
        assert!(d.interface.is_none(), "counters of two different interfaces do not subtract");
        assert!(d.snmp.is_none(), "no before, no delta");
        assert!(d.softnet.is_some());
    }

    #[test]
    fn live_snapshot_is_best_effort_and_serializes() {
        let before = HostSnapshot::take("lo");
        assert!(before.interface.is_some() && before.snmp.is_some() && before.softnet.is_some(), "{before:?}");
        let missing = HostSnapshot::take("no-such-if0");
        assert!(missing.interface.is_none(), "a missing interface is None, not an error");
        let d = HostDelta::between(&before, &HostSnapshot::take("lo"));
        let json = serde_json::to_value(&d).unwrap();
        assert!(json["interface"]["rx_bytes"].is_u64(), "{json}");
        assert!(json["softnet_total"]["dropped"].is_u64(), "{json}");
        assert!(json.get("at").is_none());
    }
}
