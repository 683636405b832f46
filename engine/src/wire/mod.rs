//! Byte formats only: the UDP payload header, iperf2's and iperf3's messages, HTTP/1.1, Ethernet/IP/UDP frames, and the RSS hash NICs compute over them.

pub mod frame;
pub mod http1;
pub mod iperf2;
pub mod iperf3;
pub mod rss;
pub mod udp_payload;

/// NTttcp's default base port (its no-sync mode carries plain data: no format of its own).
pub const NTTTCP_PORT: u16 = 5001;
