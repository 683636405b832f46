//! A test's kernel knobs for its data flows ([`Tuning`]): what each end sets on every flow
//! it holds, in words for the report, and each knob's own check.

use super::*;

/// Kernel knobs of a test's data flows, applied by both ends to each flow they hold, and
/// read back from the kernel afterwards. Absent keys mean the kernel's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tuning {
    /// TCP congestion control algorithm (`-C`), TCP_CONGESTION.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// SO_SNDBUF and SO_RCVBUF in bytes (`-w`), as asked (the kernel doubles and caps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// TCP_MAXSEG (`-M`), set by the connecting side before it connects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// TCP_NODELAY on the stream's flows (`-N`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nodelay: bool,
    /// IPv4 TOS byte or IPv6 traffic class (`-S`, `--dscp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// SO_MAX_PACING_RATE per flow in bits/s (`--fq-rate`): the kernel paces each flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fq_rate_bps: Option<u64>,
    /// Bytes to send in total over all flows (`-n`); the test ends when they are delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The receiver discards TCP payload in the kernel (MSG_TRUNC) instead of copying it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_rx_copy: bool,
    /// The data flows are Multipath TCP (`-m/--mptcp`): the connecting side makes them
    /// IPPROTO_MPTCP sockets (control stays TCP); the kernel falls back to TCP where the far
    /// end does not speak MPTCP.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mptcp: bool,
}

impl Tuning {
    /// The knobs that are set, in words, for the report's header; empty when none are.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.congestion {
            parts.push(format!("congestion {c}"));
        }
        if let Some(w) = self.window {
            parts.push(format!("window {}", crate::base::units::format_bytes(u64::from(w))));
        }
        if let Some(m) = self.mss {
            parts.push(format!("MSS {m}"));
        }
        if self.nodelay {
            parts.push("TCP_NODELAY".into());
        }
        if let Some(t) = self.tos {
            parts.push(format!("TOS 0x{t:02x} (DSCP {})", t >> 2));
        }
        if let Some(r) = self.fq_rate_bps {
            parts.push(format!("fq pacing {} per flow", crate::base::units::format_bits_per_second(r as f64)));
        }
        if let Some(n) = self.bytes {
            parts.push(format!("{n} bytes in total"));
        }
        if self.skip_rx_copy {
            parts.push("receive without copy (MSG_TRUNC)".into());
        }
        if self.mptcp {
            parts.push("MPTCP".into());
        }
        parts.join(", ")
    }

    /// Bytes flow `flow` of `flows` sends under `-n`: an equal share, the remainder spread
    /// over the first flows, so the shares add up to the total exactly.
    pub fn flow_bytes(&self, flow: u32, flows: u32) -> Option<u64> {
        let total = self.bytes?;
        let flows = u64::from(flows.max(1));
        Some(total / flows + u64::from(u64::from(flow) < total % flows))
    }
}

impl Tuning {
    /// `-w`'s socket buffer size from the bytes asked for: 1 byte to 2 GiB.
    pub fn window_of(bytes: u64) -> Result<u32> {
        u32::try_from(bytes)
            .ok()
            .filter(|w| (1..=MAX_WINDOW).contains(w))
            .ok_or_else(|| Error::usage(format!("-w/--window {bytes} out of range: 1 byte to 2 GiB")))
    }

    /// Checks each knob on its own (whether the kernel has a congestion control is the
    /// host's question, asked where the flows are made).
    pub fn validate(&self) -> Result<()> {
        if let Some(w) = self.window {
            Self::window_of(u64::from(w))?;
        }
        if let Some(m) = self.mss.filter(|m| !MSS_RANGE.contains(m)) {
            let (lo, hi) = (MSS_RANGE.start(), MSS_RANGE.end());
            return Err(Error::usage(if m < *lo {
                format!("-M/--mss {m} is below {lo}, the smallest MSS the kernel takes")
            } else {
                format!("-M/--mss {m} is above {hi}, the largest MSS")
            }));
        }
        if self.bytes == Some(0) {
            return Err(Error::usage("-n/--bytes must be at least 1"));
        }
        if self.fq_rate_bps == Some(0) {
            return Err(Error::usage("--fq-rate must be above 0"));
        }
        if self.mptcp && self.fq_rate_bps.is_some() {
            return Err(Error::usage(
                "--fq-rate cannot pace MPTCP flows: the kernel has no SO_MAX_PACING_RATE for them",
            ));
        }
        Ok(())
    }
}
