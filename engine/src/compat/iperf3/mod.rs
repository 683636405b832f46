//! iperf3 compatibility: uringbench against an unmodified iperf3 (3.9 and later; tested with
//! 3.12), one side at a time. The wire formats are in [`crate::wire::iperf3`], the data moves
//! through the stream workload's loops.
//!
//! - [`client`]: `send --iperf3`, our sender to `iperf3 -s`, reported as a native
//!   [`crate::metrics::figures::StreamReport`] with the iperf3 server's results as the
//!   receiver side.
//! - [`server`]: `recv --iperf3`, `iperf3 -c` clients served one test at a time behind the
//!   accept gate.

pub mod client;
mod control;
pub mod server;
mod udp;

pub use client::{params_for, run_send, Iperf3Report};
pub use server::{bind_receiver, serve, Iperf3Event, Iperf3EventSink, Iperf3TestSummary};
