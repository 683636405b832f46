//! Workloads: what runs over the flows, one file per workload (as neper does), each owning
//! both ends of its test and the report it produces.

pub mod http;
pub mod iperf2_compat;
pub mod live;
pub mod rr;
pub mod stream;
pub mod udp_stream;
