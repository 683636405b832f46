//! What the sender learns about its path before a test: the egress interface the kernel
//! routes the target through, what kind of device it is, and every rate limit on it.
//!
//! Zero-copy send only pays when a real NIC DMAs straight from user pages: on loopback and on
//! virtual devices (veth, bridges, tunnels) the kernel copies at local delivery anyway
//! (the zero-copy notifications report "copied"), so `--zerocopy auto` asks [`PathProbe::local_delivery`]. The rate limits
//! feed the verdict.

use crate::sys::hostinfo::{self, LinkInfo, Route};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// What kind of device or rule sets a path limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The egress root qdisc's rate (tbf, htb default class).
    Qdisc,
    /// The link speed of a physical NIC.
    Link,
    /// A cloud vendor's egress cap (per VM or per flow).
    CloudCap,
}

/// A rate limit found on the path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PathLimit {
    pub kind: LimitKind,
    /// What sets it: `qdisc tbf on eth0`, `link eth0`, `GCP egress cap for 8 vCPUs`.
    pub what: String,
    pub bits_per_second: f64,
    /// Where the figure comes from (vendor documentation for cloud caps).
    pub source: Option<String>,
}

/// Where a receiver's own qdiscs could hold a queue of a test's traffic, on the interface
/// it routes the sender through (`--latency`'s verdict). What it cannot see: a queue behind
/// an ingress redirect (an ifb device's qdisc), the NIC's and driver's rings, and anything in
/// a virtual switch or hypervisor between the hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReceiverQueues {
    pub interface: String,
    /// A shaping root qdisc on its egress (`tbf 100.00 Mbits/sec`): it would queue what the
    /// receiver sends back (ACKs, the probe's answers).
    pub egress_shaper: Option<String>,
    /// Its ingress qdisc (`ingress`, `clsact`): arriving packets can be policed or redirected
    /// to a queue there.
    pub ingress: Option<String>,
}

impl ReceiverQueues {
    /// The receiver's interface toward `peer` and its qdiscs; None when the route or the
    /// qdiscs cannot be read.
    pub(crate) fn toward(peer: IpAddr) -> Option<Self> {
        let route = hostinfo::route_to(peer).ok()?;
        let egress_shaper = hostinfo::root_rate_limit(route.ifindex)
            .ok()?
            .map(|q| format!("{} {}", q.kind, crate::base::units::format_bits_per_second(q.rate_bps as f64)));
        let ingress = hostinfo::ingress_qdisc(route.ifindex).ok()?;
        Some(Self { interface: route.ifname, egress_shaper, ingress })
    }

    /// Whether a qdisc of the receiver could hold the queue.
    pub fn could_hold(&self) -> bool {
        self.egress_shaper.is_some() || self.ingress.is_some()
    }
}

/// The path to one target as the kernel sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathProbe {
    pub route: Option<Route>,
    pub link: Option<LinkInfo>,
    /// Egress qdisc, link speed and cloud egress caps, in the order the verdict checks them.
    pub limits: Vec<PathLimit>,
}

impl PathProbe {
    /// Looks up the route to `dst` and the limits on its interface; every part is best-effort.
    pub(crate) fn to(dst: IpAddr, flows: u32) -> Self {
        let route = hostinfo::route_to(dst).ok();
        let link = route.as_ref().and_then(|r| LinkInfo::read(&r.ifname).ok());
        let mut limits = Vec::new();
        if let Some(r) = &route {
            if let Ok(Some(q)) = hostinfo::root_rate_limit(r.ifindex) {
                limits.push(PathLimit {
                    kind: LimitKind::Qdisc,
                    what: format!("qdisc {} on {}", q.kind, r.ifname),
                    bits_per_second: q.rate_bps as f64,
                    source: None,
                });
            }
        }
        if let Some(speed) = link.as_ref().and_then(|l| l.speed_mbps.map(|s| (l, s))) {
            limits.push(PathLimit {
                kind: LimitKind::Link,
                what: format!("link {} ({} Mbit/s)", speed.0.name, speed.1),
                bits_per_second: f64::from(speed.1) * 1e6,
                source: Some(format!("/sys/class/net/{}/speed", speed.0.name)),
            });
        }
        let local = route.as_ref().is_some_and(|r| r.local);
        if !local {
            limits.extend(cloud_limits(flows));
        }
        Self { route, link, limits }
    }

    pub(crate) fn interface(&self) -> Option<&str> {
        self.route.as_ref().map(|r| r.ifname.as_str())
    }

    /// Whether the kernel delivers locally (loopback or a software device), so that
    /// zero-copy sends would be copied anyway.
    pub(crate) fn local_delivery(&self) -> bool {
        self.route.as_ref().is_none_or(|r| r.local || r.ifname == "lo")
            || self.link.as_ref().is_none_or(|l| l.virtual_device)
    }

    /// The egress interface and its kind, for messages.
    pub(crate) fn describe(&self) -> String {
        match (&self.route, &self.link) {
            (Some(r), _) if r.local => format!("{} (local delivery)", r.ifname),
            (Some(r), Some(l)) => {
                let kind = l.driver.clone().unwrap_or_else(|| "unknown driver".into());
                format!("{} ({kind}{})", r.ifname, if l.virtual_device { ", virtual device" } else { "" })
            }
            (Some(r), None) => r.ifname.clone(),
            _ => "unknown interface".into(),
        }
    }
}

/// The vendor's egress caps when this VM runs in a cloud we recognise (engine/data/cloud-egress.json).
fn cloud_limits(flows: u32) -> Vec<PathLimit> {
    let Some(cloud) = hostinfo::Dmi::read().as_ref().and_then(hostinfo::cloud::detect) else { return Vec::new() };
    let vcpus = hostinfo::cloud::online_cpus().unwrap_or(1);
    let Some(cap) = hostinfo::egress_cap(cloud, vcpus) else { return Vec::new() };
    let mut limits = Vec::new();
    if let Some(gbps) = cap.gbps {
        limits.push(PathLimit {
            kind: LimitKind::CloudCap,
            what: format!("{} egress cap for {vcpus} vCPUs", cloud.key()),
            bits_per_second: gbps * 1e9,
            source: Some(cap.source.clone()),
        });
    }
    if let Some(per_flow) = cap.per_flow_gbps {
        limits.push(PathLimit {
            kind: LimitKind::CloudCap,
            what: format!("{} per-flow cap x {flows} flows", cloud.key()),
            bits_per_second: per_flow * 1e9 * f64::from(flows),
            source: Some(cap.source),
        });
    }
    limits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_delivery() {
        let p = PathProbe::to("127.0.0.1".parse().unwrap(), 1);
        assert_eq!(p.interface(), Some("lo"));
        assert!(p.local_delivery(), "loopback copies: no zero-copy");
        assert!(p.describe().contains("lo"), "{}", p.describe());
        assert!(p.limits.iter().all(|l| !l.what.contains("egress cap")), "no cloud cap on local delivery");
    }

    #[test]
    fn unknown_path_counts_as_local() {
        let p = PathProbe::default();
        assert!(p.local_delivery(), "without facts, auto must not assume a NIC");
        assert_eq!(p.describe(), "unknown interface");
    }
}
