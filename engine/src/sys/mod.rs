//! The host's interfaces: socket options, TCP_INFO, kernel probes, /proc and /sys, netlink, BPF and AF_XDP sockets.

pub(crate) mod affinity;
pub mod epoll;
pub mod hostinfo;
pub mod memory_node;
pub mod mptcp;
pub(crate) mod netlink;
pub mod netpath;
pub mod nic_topology;
pub mod ntuple;
pub mod probe;
pub mod settings;
pub mod signals;
pub mod sockopt;
pub mod tcpinfo;
pub mod xdp;
