//! The verdict a report carries: which limit most likely held a run back, with the figure
//! behind it. The rules that choose it are analysis/verdict.rs; the type is here, below the
//! result documents that hold it.

use crate::sys::netpath::LimitKind;
use serde::{Deserialize, Serialize};

/// What most likely limited a run. Serialized (and shown) as its short name, the
/// `verdict.bottleneck` values of docs/output.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Bottleneck {
    #[serde(rename = "incomplete")]
    Incomplete,
    #[serde(rename = "outage")]
    Outage,
    #[serde(rename = "datagram loss")]
    DatagramLoss,
    #[serde(rename = "configured rate")]
    ConfiguredRate,
    #[serde(rename = "qdisc")]
    Qdisc,
    #[serde(rename = "link speed")]
    LinkSpeed,
    #[serde(rename = "cloud egress cap")]
    CloudEgressCap,
    #[serde(rename = "receive window")]
    ReceiveWindow,
    #[serde(rename = "send buffer")]
    SendBuffer,
    #[serde(rename = "softirq-bound cpu")]
    SoftirqBoundCpu,
    #[serde(rename = "cpu contention")]
    CpuContention,
    #[serde(rename = "retransmissions")]
    Retransmissions,
    #[serde(rename = "interface drops")]
    InterfaceDrops,
    #[serde(rename = "sender cpu")]
    SenderCpu,
    #[serde(rename = "receiver cpu")]
    ReceiverCpu,
    #[serde(rename = "no clear bottleneck")]
    NoClearBottleneck,
}

impl Bottleneck {
    /// The short name users see (the same string as the JSON value).
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Incomplete => "incomplete",
            Bottleneck::Outage => "outage",
            Bottleneck::DatagramLoss => "datagram loss",
            Bottleneck::ConfiguredRate => "configured rate",
            Bottleneck::Qdisc => "qdisc",
            Bottleneck::LinkSpeed => "link speed",
            Bottleneck::CloudEgressCap => "cloud egress cap",
            Bottleneck::ReceiveWindow => "receive window",
            Bottleneck::SendBuffer => "send buffer",
            Bottleneck::SoftirqBoundCpu => "softirq-bound cpu",
            Bottleneck::CpuContention => "cpu contention",
            Bottleneck::Retransmissions => "retransmissions",
            Bottleneck::InterfaceDrops => "interface drops",
            Bottleneck::SenderCpu => "sender cpu",
            Bottleneck::ReceiverCpu => "receiver cpu",
            Bottleneck::NoClearBottleneck => "no clear bottleneck",
        }
    }

    /// The limit a path limit names when it is reached.
    pub(crate) fn of_limit(kind: LimitKind) -> Self {
        match kind {
            LimitKind::Qdisc => Bottleneck::Qdisc,
            LimitKind::Link => Bottleneck::LinkSpeed,
            LimitKind::CloudCap => Bottleneck::CloudEgressCap,
        }
    }
}

impl std::fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Lets tests and callers compare with the name users see.
impl PartialEq<&str> for Bottleneck {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// The likely limit of a run, with the figure behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    pub bottleneck: Bottleneck,
    pub evidence: String,
    /// `--latency`: the queue the load built, when the round trip grew under it (e.g.
    /// `latency +16.1 ms under load: a standing queue ...`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}
