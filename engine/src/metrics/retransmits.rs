//! The sender's retransmissions as its end report carries them to the receiver
//! (session/end_report.rs): a claim from the far end, checked before it is used.

use crate::base::spec::TestSpec;
use crate::sys::tcpinfo::TcpWindow;
use serde::{Deserialize, Serialize};

/// The sending flows' retransmissions over the sender's window, as its TCP_INFO counted them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SenderRetransmits {
    /// Flows whose TCP_INFO was read at both ends of the window.
    pub flows: u32,
    /// Segments retransmitted (`tcpi_total_retrans`).
    pub retransmitted_segments: u64,
    /// Bytes sent, retransmissions included (`tcpi_bytes_sent`).
    pub bytes_sent: u64,
    /// Bytes retransmitted (`tcpi_bytes_retrans`).
    pub bytes_retrans: u64,
}

impl SenderRetransmits {
    pub fn of(w: &TcpWindow) -> Self {
        Self {
            flows: w.flows,
            retransmitted_segments: w.retransmitted_segments,
            bytes_sent: w.bytes_sent,
            bytes_retrans: w.bytes_retrans,
        }
    }

    /// The claim, when it can be true of `spec`'s test: no more flows than it has, no more
    /// bytes retransmitted than sent, and no more segments retransmitted than bytes (each
    /// retransmitted segment carries at least one).
    pub fn checked(self, spec: &TestSpec) -> Result<Self, String> {
        if u64::from(self.flows) > u64::from(spec.flows()) {
            return Err(format!("{} flows reported for a test of {}", self.flows, spec.flows()));
        }
        if self.bytes_retrans > self.bytes_sent {
            return Err(format!("{} bytes retransmitted of {} sent", self.bytes_retrans, self.bytes_sent));
        }
        if self.retransmitted_segments > self.bytes_retrans {
            return Err(format!(
                "{} segments retransmitted in {} bytes",
                self.retransmitted_segments, self.bytes_retrans
            ));
        }
        Ok(self)
    }

    /// As the verdict's TCP evidence (the figures it has; the rest stay zero).
    pub fn window(self) -> TcpWindow {
        TcpWindow {
            flows: self.flows,
            retransmitted_segments: self.retransmitted_segments,
            bytes_sent: self.bytes_sent,
            bytes_retrans: self.bytes_retrans,
            ..TcpWindow::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(flows: u32) -> TestSpec {
        TestSpec { queues: 1, flows_per_queue: flows, ..TestSpec::default() }
    }

    #[test]
    fn a_claim_that_cannot_be_true_is_refused() {
        let ok =
            SenderRetransmits { flows: 2, retransmitted_segments: 10, bytes_sent: 1_000_000, bytes_retrans: 14_480 };
        assert_eq!(ok.checked(&spec(2)), Ok(ok));
        let more_flows = SenderRetransmits { flows: 3, ..ok };
        assert!(more_flows.checked(&spec(2)).unwrap_err().contains("3 flows"));
        let more_retrans = SenderRetransmits { bytes_retrans: 2_000_000, ..ok };
        assert!(more_retrans.checked(&spec(2)).unwrap_err().contains("retransmitted of"));
        let more_segments = SenderRetransmits { retransmitted_segments: u64::MAX, ..ok };
        assert!(more_segments.checked(&spec(2)).unwrap_err().contains("segments retransmitted"));
    }
}
