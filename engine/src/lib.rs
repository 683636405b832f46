//! # uringbench engine
//!
//! The traffic engine behind the `uringbench` command: it moves bytes with io_uring, one
//! pinned queue thread per CPU, and reports what the *receiver* counted, where the CPU went
//! and what the kernel really did (zero-copy or not). It exists because socket-per-call tools
//! (iperf2, iperf3, netperf) spend their CPU on syscalls and wake-ups at high rates, and then
//! measure themselves instead of the path.
//!
//! The crate is split the way neper splits a benchmark:
//! - **transport** ([`transport`]): per-thread io_uring loops that move bytes
//!   ([`transport::tcp_send`], [`transport::tcp_recv`], the request/response loops of
//!   [`transport::rr`]), with [`ring`] for set-up and waiting;
//! - **workload** ([`workload`]): what runs over the flows and how both ends agree on it
//!   ([`workload::stream`], [`workload::rr`], [`workload::http`]), over the [`control`]
//!   channel, served by [`server`];
//! - **measurement** ([`measure`]): counters and window sampling, CPU clocks;
//! - **report** ([`report`]): the figures of each side, text and JSON.
//!
//! Capabilities are probed at run time ([`probe`]) and placement decisions ([`placement`])
//! are explained in the report, never silently assumed.

pub mod chart;
pub mod compare;
pub mod control;
pub mod doctor;
pub mod error;
pub mod experiment;
pub mod export;
pub mod fastpath;
pub mod fleet;
pub mod hostinfo;
pub mod http1;
pub mod interrupt;
pub mod iperf2;
pub mod measure;
pub mod netpath;
pub mod placement;
pub mod probe;
pub mod report;
pub mod ring;
pub mod saved;
pub mod search;
pub mod server;
pub mod settings;
pub mod sockopt;
pub mod spec;
pub mod stats;
pub mod sweep;
pub mod tcpinfo;
pub mod threads;
pub mod transport;
pub mod udp;
pub mod units;
pub mod verdict;
pub mod workload;
pub mod xdp;
pub mod zcrx;

pub use error::{Error, ErrorKind, Result};
