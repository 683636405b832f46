//! Transport loops: what one queue thread does with its ring and its flows.
//!
//! A transport loop owns an io_uring and moves bytes; it knows nothing about control
//! messages or reports. It publishes running totals through [`crate::metrics::measure::QueueCounters`]
//! and returns per-flow outcomes when its flows end.

pub mod http;
pub mod pace;
pub mod probe;
pub mod rr;
pub(crate) mod stopping;
pub mod tcp;
pub(crate) mod trip;
pub mod udp;
pub mod xdp;

use serde::{Deserialize, Serialize};

/// How one flow ended, as seen by the thread that served it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowOutcome {
    /// Queue the flow belongs to.
    pub queue: u32,
    /// Payload bytes moved over the whole test (warm-up and cool-down included).
    pub bytes: u64,
    /// Why the flow ended early, if it did.
    pub error: Option<String>,
}

/// Names a negative completion result the way users know it.
pub(crate) fn errno_text(res: i32) -> String {
    let err = std::io::Error::from_raw_os_error(-res);
    let name = match -res {
        libc::ECONNRESET => "ECONNRESET",
        libc::EPIPE => "EPIPE",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENOTCONN => "ENOTCONN",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ECANCELED => "ECANCELED",
        _ => "",
    };
    if name.is_empty() {
        err.to_string()
    } else {
        format!("{err} ({name})")
    }
}
