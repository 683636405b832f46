//! How a side moved its bytes, as typed facts: the engine's opcodes, buffer shapes and what the
//! kernel did with them. A workload hands up a [`DataPath`]; its one-line description (the
//! report's `path`) is written here, once, from the same facts the document carries as
//! `data_path`.

use crate::base::spec::{Proto, Workload};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a sleeping queue thread is woken.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Wake {
    /// The thread spins, or waits for one completion at a time by design: nothing to say.
    Unbatched,
    /// Woken once `completions` are ready or after `max_delay_us`, whichever comes first.
    Batched { completions: u32, max_delay_us: u32 },
    /// Batching was wanted but the kernel lacks IORING_FEAT_MIN_TIMEOUT.
    PerCompletion,
}

/// The data path of one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "engine", rename_all = "snake_case")]
pub enum DataPath {
    /// TCP stream sending: SEND_ZC or SEND of `len` bytes, `depth` in flight per flow.
    TcpSend { zerocopy: bool, len: u32, depth: u32, deferred_task_run: bool, wake: Wake },
    /// TCP stream receiving: multishot RECV over a buffer ring.
    TcpReceive {
        bundles: bool,
        /// MSG_TRUNC: the payload is discarded in the kernel.
        skip_rx_copy: bool,
        buffers: u32,
        buffer_bytes: u32,
        /// SO_RCVLOWAT; None: the kernel's default.
        lowat_bytes: Option<u32>,
        bytes_per_completion: f64,
        rearms: u64,
        wake: Wake,
    },
    /// TCP stream receiving with RECV_ZC from the NIC's queues, one per thread in order
    /// (`queues`; the lowest and highest also as `first_queue`, `last_queue`).
    ZeroCopyReceive {
        interface: String,
        first_queue: u32,
        last_queue: u32,
        #[serde(default)]
        queues: Vec<u32>,
        area_bytes: u64,
        bytes_per_completion: f64,
        rearms: u64,
    },
    /// UDP stream sending; `send` is the send path the transport took (GSO segments or per
    /// datagram), `iperf2`: datagrams in iperf2's format.
    UdpSend { send: String, len: u32, iperf2: bool },
    /// UDP stream sending to an iperf3 server: datagrams in iperf3's format, sequence
    /// numbers 64 bits wide when `wide_counters` (`--udp-counters-64bit`), else 32.
    Iperf3UdpSend { send: String, len: u32, wide_counters: bool },
    /// UDP stream receiving: multishot RECVMSG.
    UdpReceive { gro: bool, rcvbuf_bytes: u32, datagrams: u64, completions: u64, coalesced: u64 },
    /// AF_XDP sending; the socket's modes and counters are the side's `xdp` figures.
    XdpSend { len: u32 },
    /// AF_XDP receiving; `datagrams` accounted by sequence.
    XdpReceive { datagrams: u64 },
    /// rr and crr, on the client or the server.
    Transactions { workload: Workload, proto: Proto, client: bool, timeout_ms: u64 },
    /// The far side is a stock iperf2 server: its reports, answers to the FIN.
    Iperf2Reports { reports: usize, flows: usize },
    /// The far side is a stock iperf3 server: the results it exchanged at the end.
    Iperf3Results { streams: usize },
}

impl fmt::Display for Wake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wake::Unbatched => Ok(()),
            Wake::Batched { completions, max_delay_us } => {
                write!(f, ", woken per {completions} completions or {max_delay_us} us")
            }
            Wake::PerCompletion => {
                f.write_str(", woken per completion (kernel lacks IORING_FEAT_MIN_TIMEOUT for batched wake-ups)")
            }
        }
    }
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kib = |b: f64| b / 1024.0;
        match self {
            DataPath::TcpSend { zerocopy, len, depth, deferred_task_run, wake } => write!(
                f,
                "io_uring {} of {len} B, {depth} in flight per flow{}{wake}",
                if *zerocopy { "SEND_ZC" } else { "SEND (copy)" },
                if *deferred_task_run { ", single-issuer deferred task run" } else { "" }
            ),
            DataPath::TcpReceive {
                bundles,
                skip_rx_copy,
                buffers,
                buffer_bytes,
                lowat_bytes,
                bytes_per_completion,
                rearms,
                wake,
            } => write!(
                f,
                "io_uring multishot RECV{}{}, {buffers} x {} KiB buffer ring per thread, SO_RCVLOWAT {}, {:.0} KiB per completion, {rearms} re-arms{wake}",
                if *bundles { " bundles" } else { "" },
                if *skip_rx_copy { " with MSG_TRUNC (payload discarded in the kernel, not copied)" } else { "" },
                buffer_bytes / 1024,
                lowat_bytes.map_or("default".to_string(), |b| format!("{} KiB", b / 1024)),
                kib(*bytes_per_completion),
            ),
            DataPath::ZeroCopyReceive { interface, queues, area_bytes, bytes_per_completion, rearms, .. } => {
                write!(
                    f,
                    "io_uring multishot RECV_ZC (zero-copy) from {interface} queue{} {}, {} MiB area per thread, {:.0} KiB per completion, {rearms} re-arms",
                    if queues.len() == 1 { "" } else { "s" },
                    queues.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                    area_bytes >> 20,
                    kib(*bytes_per_completion),
                )
            }
            DataPath::UdpSend { send, len, iperf2: false } => write!(f, "io_uring UDP {send}, {len} B datagrams"),
            DataPath::Iperf3UdpSend { send, len, wide_counters } => write!(
                f,
                "io_uring {send} of {len} B datagrams (iperf3 header, {}-bit sequence numbers), no end marker: the test ends on iperf3's TEST_END",
                if *wide_counters { 64 } else { 32 }
            ),
            DataPath::UdpSend { send, len, iperf2: true } => write!(
                f,
                "io_uring {send} of {len} B datagrams (iperf2 header, 64-bit sequence numbers), iperf2 FIN exchange at the end"
            ),
            DataPath::UdpReceive { gro, rcvbuf_bytes, datagrams, completions, coalesced } => write!(
                f,
                "io_uring multishot RECVMSG, {}, SO_RCVBUF {} KiB, {datagrams} datagrams in {completions} completions ({coalesced} coalesced)",
                if *gro { "UDP GRO on" } else { "no GRO: one datagram per completion" },
                rcvbuf_bytes / 1024,
            ),
            DataPath::XdpSend { len } => write!(f, "{len} B datagrams"),
            DataPath::XdpReceive { datagrams } => write!(f, "{datagrams} datagrams accounted"),
            DataPath::Transactions { workload, proto, client, timeout_ms } => f.write_str(&match (workload, proto, client) {
                (Workload::Crr, _, true) => {
                    "io_uring CONNECT + SEND + RECV + CLOSE per transaction, a new TCP connection each, server closes first".into()
                }
                (Workload::Crr, _, false) => {
                    "io_uring multishot ACCEPT + RECV + SEND per connection, closed after the answer".into()
                }
                (_, Proto::Udp, true) => {
                    format!("io_uring SEND + RECV per transaction on connected UDP sockets, {timeout_ms} ms timeout")
                }
                (_, Proto::Udp, false) => "io_uring RECV + SEND per transaction on connected UDP sockets".into(),
                (_, _, true) => {
                    "io_uring SEND + RECV per transaction, one transaction in flight per flow, TCP_NODELAY".into()
                }
                (_, _, false) => "io_uring RECV + SEND per transaction, TCP_NODELAY".to_string(),
            }),
            DataPath::Iperf2Reports { reports, flows } => {
                write!(f, "iperf2 server reports (answers to the FIN) of {reports} of {flows} flows")
            }
            DataPath::Iperf3Results { streams } => write!(f, "iperf3 server results ({streams} streams)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_says_what_it_did() {
        let send = DataPath::TcpSend {
            zerocopy: true,
            len: 131072,
            depth: 4,
            deferred_task_run: true,
            wake: Wake::Batched { completions: 4, max_delay_us: 50 },
        };
        assert_eq!(
            send.to_string(),
            "io_uring SEND_ZC of 131072 B, 4 in flight per flow, single-issuer deferred task run, woken per 4 completions or 50 us"
        );
        let recv = DataPath::TcpReceive {
            bundles: true,
            skip_rx_copy: false,
            buffers: 64,
            buffer_bytes: 65536,
            lowat_bytes: None,
            bytes_per_completion: 96.0 * 1024.0,
            rearms: 2,
            wake: Wake::PerCompletion,
        };
        assert!(recv.to_string().starts_with("io_uring multishot RECV bundles, 64 x 64 KiB buffer ring per thread, SO_RCVLOWAT default, 96 KiB per completion, 2 re-arms, woken per completion"));
        let rr = DataPath::Transactions { workload: Workload::Rr, proto: Proto::Udp, client: true, timeout_ms: 250 };
        assert_eq!(rr.to_string(), "io_uring SEND + RECV per transaction on connected UDP sockets, 250 ms timeout");
        let json = serde_json::to_value(&send).unwrap();
        assert_eq!(
            (json["engine"].as_str(), json["wake"]["batched"]["completions"].as_u64()),
            (Some("tcp_send"), Some(4))
        );
        assert_eq!(serde_json::from_value::<DataPath>(json).unwrap(), send);
    }
}
