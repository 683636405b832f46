//! The UDP receive path: datagram headers (wire::udp_payload) into a flow's sequence tracker
//! (metrics::seq). The first byte picks a mode:
//! - even: a modelled sender numbers datagrams 1, 2, ... from a start the input picks
//!   (near the 32-bit boundary, or 1), and the input decides per datagram whether the network
//!   delivers it, drops it, delays it or repeats an earlier one; at the end the sender's FINs
//!   may arrive. The tracker's figures must equal the model's exactly (received + lost = sent
//!   once the FIN is in), and interval snapshots must add up to the totals.
//! - odd: arbitrary 20-byte datagram headers, decoded and accounted as the receiver does;
//!   only counting invariants can be checked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uringbench::metrics::seq::{Arrival, SeqStats, SeqTracker};
use uringbench::wire::udp_payload::{self as payload, WireTime};

const LEN: u32 = 1200;

fn arrived(i: usize) -> WireTime {
    WireTime { sec: 1_700_000_000 + (i / 1000) as u32, usec: (i % 1000) as u32 * 1000 }
}

/// Sends `seq` through the wire format and into the tracker, as the receive loop does.
fn deliver(t: &mut SeqTracker, seq: u64, fin: bool, i: usize) -> Option<Arrival> {
    let mut buf = [0u8; payload::HEADER_LEN];
    let sent = arrived(i);
    if fin {
        payload::encode_fin(&mut buf, seq, sent).expect("a FIN in range encodes");
    } else {
        payload::encode(&mut buf, seq, sent).expect("a sequence number in range encodes");
    }
    let d = payload::decode(&buf).expect("an encoded header decodes");
    assert_eq!((d.seq, d.fin), (seq, fin));
    if d.fin {
        t.record_fin(d.seq);
        None
    } else {
        Some(t.record(d.seq, LEN, d.sent, arrived(i)))
    }
}

/// Operations per run of the model: longer runs find nothing new, only run slower.
const MAX_OPS: usize = 1024;

fn modelled(ops: &[u8]) {
    let Some((&start_pick, ops)) = ops.split_first() else { return };
    let ops = &ops[..ops.len().min(MAX_OPS)];
    let first = if start_pick & 1 != 0 { 0xFFFF_FF00 } else { 1 };
    let mut t = SeqTracker::new();
    let mut next = first;
    let mut held: Vec<u64> = Vec::new();
    // Datagram `first + i` delivered at least once (the sender numbers at most one per op).
    let mut seen = vec![false; ops.len() + 1];
    let mut distinct = 0u64;
    let (mut deliveries, mut highest) = (0u64, 0u64);
    let mut snapshots = vec![SeqStats::default()];
    let mut ends_with_fin = false;
    for (i, &op) in ops.iter().enumerate() {
        let mut to_deliver = Vec::new();
        match op & 7 {
            0..=2 => {
                to_deliver.push(next);
                next += 1;
            }
            3 => next += 1, // dropped by the network
            4 => {
                held.push(next); // delayed: arrives at the next release
                next += 1;
            }
            5 => to_deliver.extend(held.drain(..).rev()),
            6 if next > first => to_deliver.push(next - 1 - u64::from(op >> 3).min(next - 1 - first)),
            6 => {}
            _ => {
                snapshots.push(t.stats());
                ends_with_fin = op & 0x80 != 0;
            }
        }
        for seq in to_deliver {
            let arrival = deliver(&mut t, seq, false, i).expect("a data datagram");
            deliveries += 1;
            let new = !std::mem::replace(&mut seen[(seq - first) as usize], true);
            distinct += u64::from(new);
            assert_eq!(arrival == Arrival::Duplicate, !new, "seq {seq}: {arrival:?}");
            assert_ne!(arrival, Arrival::TooOld, "the model never delays a datagram by a window");
            highest = highest.max(seq);
        }
    }
    let used = next - 1; // the highest sequence number the sender used
    if ends_with_fin {
        // A first FIN carries the next number; retries carry higher ones, and may come first.
        deliver(&mut t, next + 1, true, ops.len());
        deliver(&mut t, next, true, ops.len());
    }
    let s = t.stats();
    assert_eq!(s.received, distinct);
    assert_eq!(s.duplicates, deliveries - distinct);
    assert_eq!(s.bytes, distinct * u64::from(LEN));
    let expected = if ends_with_fin { used } else { highest };
    assert_eq!(s.expected, expected);
    assert_eq!(s.received + s.lost, s.expected, "received + lost = expected");
    if ends_with_fin {
        assert_eq!(s.received + s.lost, used, "received + lost = sent, once the FIN is in");
        assert_eq!(s.lost, used - distinct, "numbers below the first one the sender used count as lost");
    }
    assert!(s.out_of_order <= s.received && s.too_old == 0);
    snapshots.push(s);
    let intervals: Vec<SeqStats> = snapshots.windows(2).map(|w| w[1].delta(&w[0])).collect();
    let total = SeqStats::sum(&intervals);
    assert_eq!(
        (total.received, total.duplicates, total.out_of_order, total.bytes, total.expected),
        (s.received, s.duplicates, s.out_of_order, s.bytes, s.expected),
        "intervals add up to the totals"
    );
}

fn arbitrary_headers(data: &[u8]) {
    let mut t = SeqTracker::with_one_way_delay();
    let (mut data_datagrams, mut bytes) = (0u64, 0u64);
    for (i, chunk) in data.chunks_exact(payload::HEADER_LEN).enumerate() {
        let Some(d) = payload::decode(chunk) else { continue };
        if d.fin {
            t.record_fin(d.seq);
            continue;
        }
        let len = u32::from(chunk[16]) * 8;
        let arrival = t.record(d.seq, len, d.sent, arrived(i));
        if arrival != Arrival::Duplicate {
            data_datagrams += 1;
            bytes += u64::from(len);
        }
        assert_ne!(arrival, Arrival::Invalid, "decode never yields sequence 0");
    }
    let s = t.stats();
    assert_eq!(s.received, data_datagrams, "every non-duplicate datagram is received");
    assert_eq!(s.bytes, bytes);
    assert!(s.out_of_order <= s.received && s.too_old <= s.out_of_order);
    assert!(s.lost <= s.expected, "lost never exceeds what the sender used");
    if s.too_old == 0 {
        assert!(s.received <= s.expected, "{} distinct datagrams but only {} expected", s.received, s.expected);
    }
    assert!(s.jitter_us.is_finite() && s.jitter_us >= 0.0);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 0 {
        modelled(rest);
    } else {
        arbitrary_headers(rest);
    }
});
