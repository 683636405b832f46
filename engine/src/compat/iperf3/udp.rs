//! What both roles share over UDP: which streams each end sends on, and the datagram figures
//! in the results we give the other end.

use crate::transport::udp::recv::UdpFlowReceived;
use crate::transport::udp::send::UdpFlowSent;
use crate::wire::iperf3::{stream_id, Results};

/// Streams by index, each with its socket.
pub(super) type Indexed<T> = Vec<(u32, T)>;

/// A test's streams (by index, in the order the client opened them) parted by who sends on
/// them: (the client's, the server's), each numbered from 0. The client opens its sending
/// streams first, so with `--bidir` the first `n` are its own and the next `n` the server's.
pub(super) fn by_sender<T>(streams: Indexed<T>, n: u32, reverse: bool, bidir: bool) -> (Indexed<T>, Indexed<T>) {
    match (reverse, bidir) {
        (_, true) => {
            let (client, server): (Vec<_>, Vec<_>) = streams.into_iter().partition(|(i, _)| *i < n);
            (client, server.into_iter().map(|(i, s)| (i - n, s)).collect())
        }
        (true, false) => (Vec::new(), streams),
        (false, false) => (streams, Vec::new()),
    }
}

/// Puts each flow we sent on in `results` as iperf3 shows a sending UDP stream: its highest
/// sequence number as its datagram count (flow q is stream `first_id + q`); a UDP sender has
/// no retransmits to tell.
pub(super) fn with_sent_figures(results: &mut Results, flows: &[UdpFlowSent], first_id: usize) {
    for flow in flows {
        if let Some(s) = results.streams.iter_mut().find(|s| s.id == stream_id(first_id + flow.queue as usize)) {
            s.packets = flow.next_seq.saturating_sub(1);
        }
    }
    if !flows.is_empty() {
        results.sender_has_retransmits = Some(false);
    }
}

/// Puts each flow we received on in `results` as iperf3 shows a receiving UDP stream: bytes,
/// datagrams lost (gaps less late arrivals), the highest sequence number seen, jitter.
pub(super) fn with_received_figures(results: &mut Results, flows: &[UdpFlowReceived], first_id: usize) {
    for flow in flows {
        if let Some(s) = results.streams.iter_mut().find(|s| s.id == stream_id(first_id + flow.queue as usize)) {
            s.bytes = flow.stats.bytes;
            s.errors = flow.stats.lost;
            s.packets = flow.stats.expected;
            s.jitter_s = flow.stats.jitter_us / 1e6;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::iperf3::StreamResult;

    #[test]
    fn streams_are_parted_by_who_sends_on_them() {
        let streams = || (0..4).map(|i| (i, i * 10)).collect::<Vec<_>>();
        assert_eq!(by_sender(streams(), 4, false, false), (streams(), vec![]));
        assert_eq!(by_sender(streams(), 4, true, false), (vec![], streams()));
        assert_eq!(by_sender(streams(), 2, false, true), (vec![(0, 0), (1, 10)], vec![(0, 20), (1, 30)]));
    }

    #[test]
    fn sent_and_received_flows_become_their_streams_results() {
        let stream = |id| StreamResult { id, bytes: 1, ..StreamResult::default() };
        // --bidir -P 2: ours sending are 1 and 3, ours receiving 4 and 5.
        let mut results = Results { streams: vec![stream(1), stream(3), stream(4), stream(5)], ..Results::default() };
        let sent = UdpFlowSent { queue: 1, datagrams: 9, next_seq: 11, ..UdpFlowSent::default() };
        let mut received = UdpFlowReceived { queue: 0, ..UdpFlowReceived::default() };
        received.stats.bytes = 7000;
        received.stats.lost = 2;
        received.stats.expected = 9;
        received.stats.jitter_us = 50.0;
        with_sent_figures(&mut results, &[sent], 0);
        with_received_figures(&mut results, &[received], 2);
        assert_eq!(results.sender_has_retransmits, Some(false));
        assert_eq!(results.stream(3).map(|s| s.packets), Some(10), "the highest sequence number sent");
        let s4 = results.stream(4).unwrap();
        assert_eq!((s4.bytes, s4.errors, s4.packets), (7000, 2, 9));
        assert!((s4.jitter_s - 50e-6).abs() < 1e-12);
        assert_eq!(results.stream(5).map(|s| s.bytes), Some(1), "untouched");
    }
}
