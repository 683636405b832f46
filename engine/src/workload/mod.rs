//! Workloads: what runs over the flows, one file per workload (as neper does), each owning
//! both ends of its test and the report it produces.

pub mod experiment;
pub mod http;
pub(crate) mod latency_probe;
pub mod receive;
pub mod repeat;
pub mod rr;
pub mod search;
pub mod stream;
pub mod sweep;
pub mod udp_stream;
pub mod xdp_live;
pub mod xdp_sender;
pub mod xdp_stream;
