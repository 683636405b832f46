//! # uringbench engine
//!
//! The traffic engine behind the `uringbench` command: it moves bytes with io_uring, one
//! pinned queue thread per CPU, and reports what the *receiver* counted, where the CPU went
//! and what the kernel really did (zero-copy or not).
//!
//! The crate is cut into layers; a layer imports only the layers above it in this table
//! (`layer_rules` enforces it, docs/architecture.md explains it):
//!
//! | layer | holds |
//! |---|---|
//! | [`base`] | errors, units, the test spec, the stop token |
//! | [`sys`] | socket options, TCP_INFO, probes, /proc and /sys, netlink, BPF, AF_XDP sockets, stop signals, host settings |
//! | [`doctor`] | host readiness checks |
//! | [`wire`] | byte formats: UDP payload header, iperf2, iperf3, HTTP/1.1, frames |
//! | [`uring`] | rings, waiting, registered memory, fast paths, zcrx |
//! | [`metrics`] | counters, sampling, sequence tracking, the figure types, statistics over runs |
//! | [`transport`] | per-thread loops: [`transport::tcp`], [`transport::udp`], [`transport::xdp`] |
//! | [`runtime`] | placement, queue threads, the one side skeleton, the side report built from them |
//! | [`session`] | the control channel, the live test, the sender's session, the direction driver, the receiver's accept loop and limits |
//! | [`workload`] | stream, request/response, HTTP, sweep, rate search, experiments, what the receiver runs |
//! | [`compat`] | iperf2, iperf3 and NTttcp interoperability |
//! | [`analysis`] | the bottleneck verdict, A/B comparisons |
//! | [`report`] | text, JSON, CSV, charts, saved results |

// What is not part of the engine's API is `pub(crate)`, and the compiler keeps it so; every
// unsafe block says why it is sound, every unsafe fn what its caller must uphold.
#![warn(unreachable_pub)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod analysis;
pub mod base;
pub mod compat;
pub mod doctor;
pub mod metrics;
pub mod report;
pub mod runtime;
pub mod session;
pub mod sys;
pub mod transport;
pub mod uring;
pub mod wire;
pub mod workload;

#[cfg(test)]
mod layer_rules;

pub use crate::base::error::{Error, ErrorKind, Result};

// The engine's front door: a test is described by a `TestSpec`, sent with `run_send`, served
// by `serve` on a `ReceiverConfig` with the receiver's `Workloads`, ended early through a
// `StopToken`, and reported as a `StreamReport`. Against an iperf3 end: `iperf3_send`, and
// `iperf3_bind` + `iperf3_serve` with `PeerRecvOptions`. Everything else is reached through its layer.
pub use crate::base::spec::{Direction, Proto, TestSpec};
pub use crate::base::stop::StopToken;
pub use crate::base::text::peer_text;
pub use crate::base::units::format_bits_per_second;
pub use crate::compat::iperf3::{
    bind_receiver as iperf3_bind, serve as iperf3_serve, Iperf3Event, Iperf3EventSink, Iperf3TestSummary,
};
pub use crate::compat::iperf3::{run_send as iperf3_send, Iperf3Report};
pub use crate::compat::ntttcp::{
    bind_receiver as ntttcp_bind, run_send as ntttcp_send, serve as ntttcp_serve, NtttcpEvent, NtttcpEventSink,
    NtttcpReport, NtttcpTestSummary, NTTTCP_PORT,
};
pub use crate::compat::PeerRecvOptions;
pub use crate::metrics::figures::{SideReport, StreamReport, SCHEMA_VERSION};
pub use crate::session::receiver::{ReceiverConfig, ServerEvent, ServerLimits};
pub use crate::session::sender::SendOptions;
pub use crate::session::server::{bind, serve};
pub use crate::uring::fastpath::FastPaths;
pub use crate::wire::iperf3::IPERF3_PORT;
pub use crate::workload::receive::Workloads;
pub use crate::workload::stream::run_send;
