//! `--trip-times` over TCP rr: the server stamps each response's first 8 bytes with the
//! CLOCK_REALTIME time (nanoseconds, big-endian) at which the whole request had arrived; the
//! client splits each round trip into its legs (transport/trip.rs). Only as meaningful as
//! the two clocks are alike: the workload says on what grounds it trusts them.
//!
//! Server: a response is one `sendmsg` of two pieces, its own stamp and the shared payload,
//! so every response in flight (a `--bounceback` burst has several) keeps its own stamp.
//! Client: each flow receives into its own scratch, where the stamps are read.

// The clock-neutral parts, where the TCP loop looks for them.
pub(crate) use crate::transport::trip::{realtime_ns, TripLegs};

/// Bytes of the stamp at the head of each response.
pub(crate) const STAMP_LEN: usize = crate::base::spec::TRIP_STAMP_LEN as usize;
/// Per-flow receive scratch of a client that reads stamps.
pub(crate) const TRIP_SCRATCH: u32 = 16 * 1024;

/// One stamped response in flight: its stamp, the two pieces of its `sendmsg` and the
/// bytes of it sent so far.
struct Slot {
    stamp: [u8; STAMP_LEN],
    iov: [libc::iovec; 2],
    msg: libc::msghdr,
    done: u32,
}

/// The server's stamped responses: `per_flow` slots for each flow (as many responses as a
/// flow can have in flight), used in turn. The slots never move while the kernel reads them:
/// they are allocated once, boxed.
pub(crate) struct StampedSends {
    slots: Box<[Slot]>,
    per_flow: usize,
    next: Vec<usize>,
}

impl StampedSends {
    pub(crate) fn new(flows: usize, per_flow: u32) -> Self {
        let per_flow = per_flow.max(1) as usize;
        let empty = || Slot {
            stamp: [0; STAMP_LEN],
            iov: [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2],
            // SAFETY: msghdr is plain data; all-zero is its empty value.
            msg: unsafe { std::mem::zeroed() },
            done: 0,
        };
        Self { slots: (0..flows * per_flow).map(|_| empty()).collect(), per_flow, next: vec![0; flows] }
    }

    /// Takes flow `flow`'s next slot for a response stamped `t2`; returns its number within
    /// the flow.
    pub(crate) fn start(&mut self, flow: usize, t2: u64) -> u32 {
        let n = self.next[flow];
        self.next[flow] = (n + 1) % self.per_flow;
        let slot = &mut self.slots[flow * self.per_flow + n];
        slot.stamp = t2.to_be_bytes();
        slot.done = 0;
        n as u32
    }

    /// Points slot `n` of `flow` at what is left of its `resp_len`-byte response: the rest
    /// of its stamp, then the rest from `payload` (shared, at least `resp_len` bytes).
    pub(crate) fn message(&mut self, flow: usize, n: u32, payload: *const u8, resp_len: u32) -> *const libc::msghdr {
        let slot = &mut self.slots[flow * self.per_flow + n as usize];
        let done = slot.done as usize;
        let stamp_left = STAMP_LEN.saturating_sub(done);
        let payload_done = done.saturating_sub(STAMP_LEN);
        slot.iov[0] =
            libc::iovec { iov_base: slot.stamp[STAMP_LEN - stamp_left..].as_mut_ptr().cast(), iov_len: stamp_left };
        slot.iov[1] = libc::iovec {
            iov_base: payload.cast_mut().cast(),
            iov_len: (resp_len as usize - STAMP_LEN).saturating_sub(payload_done),
        };
        slot.msg.msg_iov = slot.iov.as_mut_ptr();
        slot.msg.msg_iovlen = 2;
        &slot.msg
    }

    /// Counts `sent` more bytes of slot `n`'s response; whether it is now whole.
    pub(crate) fn sent(&mut self, flow: usize, n: u32, sent: u32, resp_len: u32) -> bool {
        let slot = &mut self.slots[flow * self.per_flow + n as usize];
        slot.done += sent;
        slot.done >= resp_len
    }
}

/// A client flow's reading of the stamps of its current burst.
#[derive(Default)]
pub(crate) struct FlowStamps {
    /// CLOCK_REALTIME when the burst's requests were sent.
    pub sent_ns: u64,
    stamp: [u8; STAMP_LEN],
}

impl FlowStamps {
    /// Reads `bytes`, the burst's response bytes from offset `at` on, which arrived at
    /// CLOCK_REALTIME `now`: each stamp they complete is read, and each response they end
    /// has its legs recorded into `legs` (when given: inside the window).
    pub(crate) fn received(&mut self, bytes: &[u8], at: u64, resp_len: u32, now: u64, mut legs: Option<&mut TripLegs>) {
        let resp_len = u64::from(resp_len);
        let end = at + bytes.len() as u64;
        let mut k = at / resp_len;
        while k * resp_len < end {
            let head = k * resp_len;
            // The stamp's bytes inside this piece.
            for pos in head.max(at)..(head + STAMP_LEN as u64).min(end) {
                self.stamp[(pos - head) as usize] = bytes[(pos - at) as usize];
            }
            if head + resp_len <= end {
                if let Some(legs) = legs.as_deref_mut() {
                    legs.record(self.sent_ns, u64::from_be_bytes(self.stamp), now);
                }
            }
            k += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    #[test]
    fn stamps_split_across_pieces_are_read_whole() {
        // Two 12-byte responses stamped 1,000 and 2,000 ns, sent at 400, arriving at 5,000.
        let mut wire = Vec::new();
        for t in [1_000u64, 2_000] {
            wire.extend_from_slice(&t.to_be_bytes());
            wire.extend_from_slice(b"rrrr");
        }
        for cut in 1..wire.len() {
            let mut flow = FlowStamps { sent_ns: 400, ..FlowStamps::default() };
            let mut legs = TripLegs::new();
            flow.received(&wire[..cut], 0, 12, 5_000, Some(&mut legs));
            flow.received(&wire[cut..], cut as u64, 12, 5_000, Some(&mut legs));
            assert_eq!(legs.request.len(), 2, "cut at {cut}");
            // The histogram keeps 3 significant digits.
            let near = |h: &Histogram<u64>, lo: u64, hi: u64| h.equivalent(h.min(), lo) && h.equivalent(h.max(), hi);
            assert!(near(&legs.request, 600, 1_600), "cut at {cut}");
            assert!(near(&legs.response, 3_000, 4_000), "cut at {cut}");
            assert_eq!(legs.negative, 0);
        }
    }

    #[test]
    fn a_partly_sent_response_resumes_inside_its_stamp() {
        let payload = [b'r'; 32];
        let mut s = StampedSends::new(1, 2);
        let n = s.start(0, 0x0102_0304_0506_0708);
        assert!(!s.sent(0, n, 3, 20));
        let msg = s.message(0, n, payload.as_ptr(), 20);
        // SAFETY: the message and its pieces point into `s` and `payload`, both alive.
        let (first, second) = unsafe { (*(*msg).msg_iov, *(*msg).msg_iov.add(1)) };
        assert_eq!(first.iov_len, 5, "the stamp's last 5 bytes");
        // SAFETY: iov_base points at the slot's stamp, 5 bytes left.
        assert_eq!(unsafe { *first.iov_base.cast::<u8>() }, 4);
        assert_eq!(second.iov_len, 12, "then the whole payload part");
        assert!(s.sent(0, n, 17, 20));
        assert_eq!(s.start(0, 9), 1, "slots are used in turn");
    }
}
