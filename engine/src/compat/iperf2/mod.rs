//! iperf2 compatibility: uringbench against an unmodified iperf 2.1.8, one side at a time, so
//! a uringbench figure can be set against the iperf2 baseline users already have without
//! installing uringbench on both hosts. An adapter over the ordinary engine: the wire formats
//! are in [`crate::wire::iperf2`], the loops are the stream workload's.
//!
//! - [`client`]: `send --iperf2`, our sender to `iperf -s [-u]`, reported as a native
//!   [`crate::report::stream::StreamReport`] with iperf2's server report as the receiver side.
//! - [`server`]: `recv --iperf2`, `iperf -c [-u]` clients served on one port, within limits:
//!   its options and events are in [`receiver`], the client tests in flight in `groups`, the
//!   UDP clients' sockets in `udp`.

pub mod client;
mod groups;
pub mod receiver;
pub mod server;
mod udp;

pub use client::{run_send, Iperf2Report};
pub use receiver::{Caps, Iperf2Event, Iperf2EventSink, Iperf2Listeners, Iperf2RecvOptions, Iperf2TestSummary};
pub use server::{bind_receiver, serve};
