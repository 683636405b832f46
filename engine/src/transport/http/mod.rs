//! The `http` load's client thread: its io_uring loop over its share of the connections
//! ([`client`]), the piece of each interval it hands to the run ([`pieces`]), and the
//! failures it counts by kind. The run around the threads (options, the one side they run
//! through, the report) is `workload::http`'s.

pub mod client;
pub mod pieces;

use serde::Serialize;
use std::collections::BTreeMap;

/// Kinds of failed requests. A non-2xx status is not one of them: it is a status count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    Connect,
    Write,
    Read,
    Timeout,
    Malformed,
    OversizedHeaders,
}

impl FailKind {
    pub(crate) const ALL: [FailKind; 6] = [
        FailKind::Connect,
        FailKind::Write,
        FailKind::Read,
        FailKind::Timeout,
        FailKind::Malformed,
        FailKind::OversizedHeaders,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FailKind::Connect => "connect",
            FailKind::Write => "write",
            FailKind::Read => "read",
            FailKind::Timeout => "timeout",
            FailKind::Malformed => "malformed",
            FailKind::OversizedHeaders => "oversized_headers",
        }
    }
}

/// Errors by kind, with the first message of each kind as an example.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ErrorCounts {
    pub connect: u64,
    pub write: u64,
    pub read: u64,
    pub timeout: u64,
    pub malformed: u64,
    pub oversized_headers: u64,
    /// One example message per kind that occurred.
    pub examples: BTreeMap<String, String>,
}

impl ErrorCounts {
    pub(crate) fn add(&mut self, kind: FailKind, message: impl FnOnce() -> String) {
        *self.slot(kind) += 1;
        self.examples.entry(kind.name().to_owned()).or_insert_with(message);
    }
    fn slot(&mut self, kind: FailKind) -> &mut u64 {
        match kind {
            FailKind::Connect => &mut self.connect,
            FailKind::Write => &mut self.write,
            FailKind::Read => &mut self.read,
            FailKind::Timeout => &mut self.timeout,
            FailKind::Malformed => &mut self.malformed,
            FailKind::OversizedHeaders => &mut self.oversized_headers,
        }
    }
    pub fn get(&self, kind: FailKind) -> u64 {
        match kind {
            FailKind::Connect => self.connect,
            FailKind::Write => self.write,
            FailKind::Read => self.read,
            FailKind::Timeout => self.timeout,
            FailKind::Malformed => self.malformed,
            FailKind::OversizedHeaders => self.oversized_headers,
        }
    }
    pub fn total(&self) -> u64 {
        self.connect + self.write + self.read + self.timeout + self.malformed + self.oversized_headers
    }
    pub(crate) fn merge(&mut self, other: &ErrorCounts) {
        for kind in FailKind::ALL {
            *self.slot(kind) += other.get(kind);
        }
        for (k, v) in &other.examples {
            self.examples.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}
