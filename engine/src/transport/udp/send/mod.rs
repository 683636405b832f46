//! The UDP sending queue thread: numbered, timestamped datagrams on connected UDP sockets.
//!
//! Two paths, and the result says which one ran (a GSO send crosses veth as one packet,
//! ~10x the datagram rate of one send per datagram):
//! - **GSO**: one `SendMsg` carries up to [`MAX_GSO_SEGMENTS`] datagrams (at most
//!   [`MAX_GSO_BYTES`] bytes) with a `SOL_UDP/UDP_SEGMENT` cmsg; the kernel cuts it into
//!   datagrams of `len` bytes. Each datagram still gets its own header, sequence number and
//!   timestamp, written by us into its part of the buffer.
//! - **per datagram** (`--no-gso`): one `Send` per datagram, several in flight.
//!
//! A send is in flight until its completion arrives, and the kernel reads its buffer,
//! `msghdr`, `iovec` and cmsg until then; so each flow owns a few *send slots*, each with all
//! four, allocated once and reused when their completion comes back.
//!
//! Sequence numbers of a send that failed are not lost: they go back to the flow and are sent
//! again (iperf2 does the same), so a receiver's loss figure means loss
//! on the path, not refused sends. `ECONNREFUSED` (the receiver's port was closed when an
//! earlier datagram arrived: ICMP port unreachable) is counted and retried, never fatal.
//!
//! At the end, [`send_fins`] tells the receiver the flow is over (negated next sequence
//! number, iperf2 style) and can wait for an iperf2 server's report.
//!
//! The FIN exchange is [`fin`]'s; the send slots lent to the kernel, [`slots`]'.

mod fin;
mod slots;

pub use fin::FinConfig;

use crate::base::error::{Error, Result};
use crate::metrics::measure::QueueCounters;
use crate::transport::pace::Pacer;
use crate::transport::stopping::Stopping;
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, push, wait_for_completions, RingPaths, WaitMode, WakeBatch};
use crate::wire::iperf2::ServerReport;
use crate::wire::udp_payload::{DatagramHeader, WireTime, FIRST_SEQ, HEADER_LEN};
use fin::send_fins;
use io_uring::{opcode, types};
use slots::{new_slots, SendRing};
use std::collections::VecDeque;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 on older kernels,
/// 128 on newer ones: 64 works everywhere).
pub(crate) const MAX_GSO_SEGMENTS: u32 = 64;
/// Most bytes in one GSO send: the largest IPv4 UDP payload (65535 - 20 - 8).
pub(crate) const MAX_GSO_BYTES: u32 = 65_507;
/// Largest datagram payload at all (IPv4).
pub(crate) const MAX_DATAGRAM: u32 = crate::base::spec::MAX_UDP_PAYLOAD;

/// One flow handed to a sending thread: a UDP socket already `connect`ed to the receiver.
pub struct UdpSendFlow {
    pub socket: UdpSocket,
    pub queue: u32,
}

/// How a UDP sending thread runs.
#[derive(Debug, Clone)]
pub struct UdpSendConfig {
    pub wait: WaitMode,
    /// The fast paths the thread's ring is built with.
    pub ring: RingPaths,
    /// Completions to gather per wake-up when sleeping.
    pub batch: WakeBatch,
    /// Datagram payload length in bytes, header included (at least [`HEADER_LEN`]).
    pub len: u32,
    /// Use UDP GSO (falls back to one send per datagram if the kernel or device refuses it).
    pub gso: bool,
    /// Sends in flight per flow (send slots). 4-8 are plenty with GSO; per datagram, more
    /// (32-64) keep the socket busy.
    pub inflight: u32,
    /// Stop issuing new sends at this instant.
    pub deadline: Instant,
    /// Raised to stop before the deadline (the test was stopped early).
    pub halt: Option<Arc<AtomicBool>>,
    /// This thread's share of `--rate` in bits/s (payload bytes); 0 = unlimited.
    pub rate_bps: u64,
    /// Datagrams back to back before the rate is checked (`-b RATE/N`); 0: none. With GSO a
    /// send carries up to a burst's datagrams, so a burst of up to 64 leaves as one send.
    pub burst: u32,
    /// Datagrams per flow after which the flow stops (0 = until the deadline).
    pub max_datagrams: u64,
    /// How long in-flight sends may take to complete after the deadline.
    pub drain_limit: Duration,
    /// Send FINs at the end ([`send_fins`]); `None` leaves it to the caller.
    pub fin: Option<FinConfig>,
    /// Counts refused sends as they happen, for a caller that stops when the peer has gone.
    pub refused: Option<Arc<AtomicU64>>,
}

/// Which path carried the datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPath {
    /// UDP GSO, up to `segments` datagrams per send.
    Gso { segments: u32 },
    /// One send per datagram.
    PerDatagram,
}

impl SendPath {
    pub fn describe(&self) -> String {
        match self {
            SendPath::Gso { segments } => format!("UDP GSO, up to {segments} datagrams per send"),
            SendPath::PerDatagram => "one send per datagram (no GSO)".into(),
        }
    }
}

/// What one flow sent.
#[derive(Debug, Clone, Default)]
pub struct UdpFlowSent {
    pub queue: u32,
    /// Datagrams the kernel accepted.
    pub datagrams: u64,
    /// Payload bytes the kernel accepted.
    pub bytes: u64,
    /// The next sequence number (`last + 1`): the one the FIN carries.
    pub next_seq: u64,
    /// Sequence numbers whose send failed and was not retried before the end. The identity
    /// `datagrams + abandoned == next_seq - 1` always holds.
    pub abandoned: u64,
    /// Sends that failed with `ECONNREFUSED` (ICMP port unreachable from the receiver).
    pub refused: u64,
    /// Sends that failed and were retried (refused ones included).
    pub retried_sends: u64,
    /// FIN datagrams sent.
    pub fins: u32,
    /// The iperf2 server report, when one was awaited and arrived.
    pub report: Option<ServerReport>,
    /// Why the flow stopped early, if it did.
    pub error: Option<String>,
}

impl UdpFlowSent {
    /// The flow's outcome for the side's report: what the kernel accepted.
    pub(crate) fn outcome(&self) -> FlowOutcome {
        FlowOutcome { queue: self.queue, bytes: self.bytes, error: self.error.clone() }
    }
}

/// Result of one UDP sending thread.
#[derive(Debug, Clone)]
pub struct UdpSendResult {
    pub flows: Vec<UdpFlowSent>,
    /// The path that ran at the end (GSO may have fallen back).
    pub path: SendPath,
    /// Completed send operations (datagrams ÷ sends shows the GSO batching).
    pub sends: u64,
    /// Set when the path changed or something was adjusted; one human line.
    pub note: Option<String>,
    /// In-flight sends that had not completed when the drain limit ran out.
    pub stuck: u32,
}

/// Datagrams per GSO send for datagrams of `len` bytes (1 when GSO cannot help).
pub(crate) fn gso_segments(len: u32) -> u32 {
    (MAX_GSO_BYTES / len.max(1)).clamp(1, MAX_GSO_SEGMENTS)
}

/// A flow being sent on: its socket, its free send slots, its next sequence number and its counts.
struct UdpSendingFlow {
    socket: UdpSocket,
    queue: u32,
    free: Vec<usize>,
    next_seq: u64,
    retry: VecDeque<(u64, u32)>,
    out: UdpFlowSent,
}

impl UdpSendingFlow {
    fn inflight(&self, per_flow: usize) -> usize {
        per_flow - self.free.len()
    }
    /// Whether the flow may issue more (ignoring pacing and free slots).
    fn has_work(&self, max: u64) -> bool {
        self.out.error.is_none() && (!self.retry.is_empty() || max == 0 || self.next_seq <= max)
    }
    /// The numbers of the next send of at most `want` datagrams: (first, count, from the
    /// retry queue). Numbers to retry go first; new ones stop at `max` (0: no end).
    #[inline]
    fn next_numbers(&self, want: u32, max: u64) -> (u64, u32, bool) {
        match self.retry.front() {
            Some(&(first, n)) => (first, n.min(want), true),
            None => {
                let left = if max == 0 { u64::MAX } else { max + 1 - self.next_seq };
                (self.next_seq, (want as u64).min(left) as u32, false)
            }
        }
    }
    /// Takes the `count` numbers [`UdpSendingFlow::next_numbers`] gave off the retry queue or the
    /// sequence.
    #[inline]
    fn take_numbers(&mut self, count: u32, from_retry: bool) {
        if from_retry {
            let front = self.retry.front_mut().expect("next_numbers read it");
            if front.1 == count {
                self.retry.pop_front();
            } else {
                front.0 += u64::from(count);
                front.1 -= count;
            }
        } else {
            self.next_seq += u64::from(count);
        }
    }
}

/// The path MTU of a connected socket (`IP_MTU` / `IPV6_MTU`), for error messages.
pub fn path_mtu(socket: &UdpSocket) -> Option<u32> {
    let v6 = socket.peer_addr().ok()?.is_ipv6();
    let (level, name) = if v6 { (libc::IPPROTO_IPV6, libc::IPV6_MTU) } else { (libc::IPPROTO_IP, libc::IP_MTU) };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket fd; mtu and len live across the call and len gives mtu's size.
    let rc =
        unsafe { libc::getsockopt(socket.as_raw_fd(), level, name, (&mut mtu as *mut libc::c_int).cast(), &mut len) };
    (rc == 0 && mtu > 0).then_some(mtu as u32)
}

/// IP + UDP header bytes in front of each datagram on the wire.
pub(crate) fn ip_udp_overhead(socket: &UdpSocket) -> u32 {
    match socket.peer_addr() {
        Ok(a) if a.is_ipv6() => 48,
        _ => 28,
    }
}

pub(crate) fn mtu_message(socket: &UdpSocket, len: u32, gso: bool) -> String {
    let overhead = ip_udp_overhead(socket);
    let what = if gso { "UDP GSO segment" } else { "datagram" };
    match path_mtu(socket) {
        Some(mtu) => format!(
            "{what} of {len} bytes + {overhead} header bytes does not fit the path MTU of {mtu} bytes (IP_MTU); \
             use --len {} or less (or raise the MTU on the path)",
            mtu.saturating_sub(overhead),
        ),
        None => format!("{what} of {len} bytes is larger than the path MTU allows; lower --len"),
    }
}

/// One UDP sending thread: its ring and slots, its flows and what it counted.
struct Sender<'a> {
    cfg: &'a UdpSendConfig,
    sr: SendRing,
    flows: Vec<UdpSendingFlow>,
    /// Datagram length in bytes (`cfg.len`).
    len: usize,
    /// Send slots per flow.
    per_flow: usize,
    /// Datagrams per GSO send.
    segments: u32,
    /// GSO in use (it falls back to one send per datagram if the kernel refuses it).
    gso: bool,
    /// A GSO send succeeded: later errors are not GSO refusals.
    gso_confirmed: bool,
    note: Option<String>,
    pacer: Pacer,
    /// Completed send operations.
    sends: u64,
    stuck: u32,
    last_activity: Instant,
    /// Completions of one reap, reused so the loop does not allocate.
    cqes: Vec<(u64, i32)>,
    /// The header every datagram starts with.
    header: DatagramHeader,
    /// The flow whose turn it is to send next (see [`Self::issue`]).
    next_flow: usize,
}

impl<'a> Sender<'a> {
    /// Set-up: checks the length, chooses GSO and the datagrams per send, and builds the
    /// slots, the ring and the flows.
    fn new(flows: Vec<UdpSendFlow>, cfg: &'a UdpSendConfig, header: DatagramHeader) -> Result<Self> {
        if cfg.len < HEADER_LEN as u32 || cfg.len > MAX_DATAGRAM {
            return Err(Error::usage(format!(
                "UDP datagram length {} is outside {HEADER_LEN}..={MAX_DATAGRAM} bytes (the header takes {HEADER_LEN})",
                cfg.len
            )));
        }
        let len = cfg.len as usize;
        let per_flow = cfg.inflight.clamp(1, 1024) as usize;
        let mut note = None;
        let max_segments = gso_segments(cfg.len);
        let gso = cfg.gso && max_segments > 1;
        if cfg.gso && !gso {
            note = Some(format!("GSO off: a datagram of {} bytes leaves no room for two in one send", cfg.len));
        }
        // With a rate, keep each send to about a millisecond's worth so GSO does not turn pacing
        // into 64 KiB bursts; with bursts asked for, to one burst.
        let segments = if cfg.rate_bps > 0 && cfg.burst > 0 {
            cfg.burst.min(max_segments)
        } else if cfg.rate_bps > 0 {
            ((cfg.rate_bps / 8 / 1000) / cfg.len as u64).clamp(1, u64::from(max_segments)) as u32
        } else {
            max_segments
        };
        let slot_bytes = if gso { len * segments as usize } else { len };
        let nslots = flows.len() * per_flow;
        let slots = new_slots(nslots, per_flow, slot_bytes, cfg, header)?;
        let entries = (nslots as u32 * 2).next_power_of_two().clamp(64, 4096);
        let sr = SendRing { ring: build_ring(entries, cfg.ring)?, slots };
        let flows = flows
            .into_iter()
            .enumerate()
            .map(|(idx, f)| UdpSendingFlow {
                queue: f.queue,
                socket: f.socket,
                free: (idx * per_flow..(idx + 1) * per_flow).rev().collect(),
                next_seq: FIRST_SEQ,
                retry: VecDeque::new(),
                out: UdpFlowSent { queue: f.queue, ..Default::default() },
            })
            .collect();
        Ok(Self {
            cfg,
            sr,
            flows,
            len,
            per_flow,
            segments,
            gso,
            gso_confirmed: false,
            note,
            pacer: Pacer::new(cfg.rate_bps, Instant::now()).in_bursts(cfg.burst, cfg.len),
            sends: 0,
            stuck: 0,
            last_activity: Instant::now(),
            cqes: Vec::with_capacity(entries as usize),
            header,
            next_flow: 0,
        })
    }

    /// Issue: fills every free slot of every flow with its next datagrams (numbers to retry
    /// first), as far as the rate allows. Returns the wait the pacer asks for when the rate
    /// stopped it.
    ///
    /// The flows take turns, one send each, from the one the pacer stopped at last: under a
    /// rate, a thread's flows share it evenly (filling one flow's slots first gave its first
    /// flow the whole rate and the others nothing).
    fn issue(&mut self, now: Instant) -> Result<Option<Duration>> {
        let cfg = self.cfg;
        let len = self.len;
        let want = if self.gso { self.segments } else { 1 };
        let wall = WireTime::now();
        let n = self.flows.len();
        let mut passed = 0;
        while passed < n {
            let turn = self.next_flow;
            self.next_flow = (turn + 1) % n;
            let flow = &mut self.flows[turn];
            if flow.free.is_empty() || !flow.has_work(cfg.max_datagrams) {
                passed += 1;
                continue;
            }
            passed = 0;
            let (first, count, from_retry) = flow.next_numbers(want, cfg.max_datagrams);
            if let Some(wait) = self.pacer.wait(now) {
                self.next_flow = turn;
                return Ok(Some(wait));
            }
            flow.take_numbers(count, from_retry);
            let idx = flow.free.pop().expect("checked above");
            let slot = &mut self.sr.slots[idx];
            for i in 0..count as usize {
                // SAFETY: (i + 1) * len <= slot_bytes: count <= segments (GSO) or 1.
                let datagram = unsafe { std::slice::from_raw_parts_mut(slot.buf.as_ptr().add(i * len), len) };
                self.header.encode(datagram, first + i as u64, wall).map_err(|e| Error::usage(e.to_string()))?;
            }
            slot.first_seq = first;
            slot.count = count;
            let fd = types::Fd(flow.socket.as_raw_fd());
            let entry = if self.gso {
                slot.iov.iov_len = count as usize * len;
                opcode::SendMsg::new(fd, &slot.msg).build()
            } else {
                opcode::Send::new(fd, slot.buf.as_ptr(), cfg.len).build()
            };
            // SAFETY: slot idx (its buffer, iovec and msghdr) stays in sr.slots, which
            // drops after sr.ring, and is not reused until its completion is reaped.
            unsafe { push(&mut self.sr.ring, &entry.user_data(idx as u64)) }?;
            self.pacer.issue(count as u64 * cfg.len as u64);
        }
        Ok(None)
    }

    /// Reap: takes every completion off the ring and accounts it.
    fn reap(&mut self, counters: &QueueCounters) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(self.sr.ring.completion().map(|c| (c.user_data(), c.result())));
        if !cqes.is_empty() {
            self.last_activity = Instant::now();
        }
        for &(ud, res) in &cqes {
            self.account(ud as usize, res, counters);
        }
        self.cqes = cqes;
    }

    /// Account: frees the slot and credits its datagrams to the flow, or hands a failed send
    /// to [`Sender::failed`].
    #[inline]
    fn account(&mut self, idx: usize, res: i32, counters: &QueueCounters) {
        let (flow_idx, first, count) = {
            let slot = &self.sr.slots[idx];
            (slot.flow, slot.first_seq, slot.count)
        };
        let flow = &mut self.flows[flow_idx];
        flow.free.push(idx);
        self.sends += 1;
        if res < 0 {
            self.failed(flow_idx, first, count, res);
            return;
        }
        if self.gso {
            self.gso_confirmed = true;
        }
        flow.out.datagrams += u64::from(count);
        flow.out.bytes += res as u64;
        counters.add(flow.queue as usize, res as u64);
    }

    /// A send of `count` datagrams from `first` failed: its bytes go back to the pacer, and
    /// its numbers are retried (transient errors, a GSO refusal, which also turns GSO off) or
    /// abandoned with the flow's error (a datagram too big for the path, anything else).
    #[cold]
    fn failed(&mut self, flow_idx: usize, first: u64, count: u32, res: i32) {
        let cfg = self.cfg;
        let flow = &mut self.flows[flow_idx];
        self.pacer.refund(u64::from(count) * cfg.len as u64);
        let errno = -res;
        // EPERM: a local firewall rule dropped the datagram; like ENOBUFS, retry its number.
        let transient = matches!(errno, libc::ECONNREFUSED | libc::EAGAIN | libc::EINTR | libc::ENOBUFS | libc::EPERM);
        let gso_refused =
            self.gso && !self.gso_confirmed && matches!(errno, libc::EIO | libc::EOPNOTSUPP | libc::EINVAL);
        let too_big = errno == libc::EMSGSIZE
            || (gso_refused
                && errno == libc::EINVAL
                && path_mtu(&flow.socket).is_some_and(|mtu| cfg.len + ip_udp_overhead(&flow.socket) > mtu));
        if too_big {
            if flow.out.error.is_none() {
                flow.out.error = Some(mtu_message(&flow.socket, cfg.len, self.gso));
            }
            flow.out.abandoned += u64::from(count);
        } else if transient || gso_refused {
            if errno == libc::ECONNREFUSED {
                flow.out.refused += 1;
                if let Some(r) = &cfg.refused {
                    r.fetch_add(1, Ordering::Relaxed);
                }
            }
            if gso_refused {
                self.gso = false;
                self.note = Some(format!(
                    "UDP GSO refused by the kernel or device ({}); sending one datagram per send",
                    errno_text(res)
                ));
            }
            flow.out.retried_sends += 1;
            flow.retry.push_back((first, count));
        } else {
            if flow.out.error.is_none() {
                flow.out.error = Some(format!("UDP send failed: {}", errno_text(res)));
            }
            flow.out.abandoned += u64::from(count);
        }
    }

    /// Tear down: the ring goes (with sends stuck in the kernel, the slot memory is leaked
    /// rather than unmapped under a late copy), every number not sent is counted as abandoned,
    /// and the FINs go out if the configuration asks.
    fn finish(self) -> UdpSendResult {
        let Sender { cfg, sr, mut flows, segments, gso, note, sends, stuck, .. } = self;
        if stuck > 0 {
            for flow in flows.iter_mut().filter(|f| f.out.error.is_none()) {
                flow.out.error = Some(format!(
                    "UDP sends did not complete within {:.1} s of the end",
                    cfg.drain_limit.as_secs_f64()
                ));
            }
            // Sends still in the kernel may read their slots until the ring's teardown has
            // cancelled them, which finishes asynchronously: tear the ring down and leak the slot
            // memory rather than unmap it under a late copy.
            let SendRing { ring, slots } = sr;
            drop(ring);
            std::mem::forget(slots);
        } else {
            drop(sr);
        }
        for flow in flows.iter_mut() {
            flow.out.next_seq = flow.next_seq;
            flow.out.abandoned += flow.retry.iter().map(|&(_, n)| u64::from(n)).sum::<u64>();
            if stuck > 0 {
                // Their fate is unknown: count them as not sent so the identity still holds.
                flow.out.abandoned = (flow.next_seq - 1).saturating_sub(flow.out.datagrams);
            }
        }
        if let Some(fin) = cfg.fin {
            let targets: Vec<(&UdpSocket, u64)> = flows.iter().map(|f| (&f.socket, f.next_seq)).collect();
            let outcomes = send_fins(&targets, cfg.len, &fin);
            for (flow, outcome) in flows.iter_mut().zip(outcomes) {
                flow.out.fins = outcome.sent;
                flow.out.report = outcome.report;
            }
        }
        let path = if gso { SendPath::Gso { segments } } else { SendPath::PerDatagram };
        UdpSendResult { flows: flows.into_iter().map(|f| f.out).collect(), path, sends, note, stuck }
    }
}

/// Runs one UDP sending thread until `cfg.deadline` (or every flow sent `max_datagrams`),
/// drains, and sends the FINs if `cfg.fin` asks.
pub fn run(flows: Vec<UdpSendFlow>, counters: &QueueCounters, cfg: &UdpSendConfig) -> Result<UdpSendResult> {
    run_with(flows, counters, cfg, DatagramHeader::Native)
}

/// [`run`], the datagrams starting with `header` (another tool's format).
pub fn run_with(
    flows: Vec<UdpSendFlow>,
    counters: &QueueCounters,
    cfg: &UdpSendConfig,
    header: DatagramHeader,
) -> Result<UdpSendResult> {
    let mut s = Sender::new(flows, cfg, header)?;
    let mut stop = Stopping::new(cfg.deadline, cfg.halt.clone(), cfg.drain_limit);
    loop {
        let now = Instant::now();
        let stopping = stop.check(now);
        let pace_wait = if stopping { None } else { s.issue(now)? };
        let inflight: usize = s.flows.iter().map(|f| f.inflight(s.per_flow)).sum();
        let all_done = s.flows.iter().all(|f| !f.has_work(cfg.max_datagrams));
        if inflight == 0 && (stopping || all_done) {
            break;
        }
        if stop.drain_over(now) {
            s.stuck = inflight as u32;
            break;
        }
        let limit = stop.wait_limit(now, pace_wait);
        wait_for_completions(&mut s.sr.ring, cfg.wait, s.last_activity, limit, cfg.batch)?;
        s.reap(counters);
    }
    Ok(s.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gso_segment_counts() {
        assert_eq!(gso_segments(1470), 44, "44 x 1470 = 64680 <= 65507");
        assert_eq!(gso_segments(100), 64, "capped at 64 datagrams");
        assert_eq!(gso_segments(40_000), 1, "no room for two");
        assert_eq!(gso_segments(0), 64, "no division by zero");
    }

    #[test]
    fn bad_length_is_a_usage_error() {
        let cfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len: 10,
            gso: true,
            inflight: 4,
            deadline: Instant::now(),
            halt: None,
            rate_bps: 0,
            burst: 0,
            max_datagrams: 0,
            drain_limit: Duration::from_millis(10),
            fin: None,
            refused: None,
        };
        let err = run(Vec::new(), &QueueCounters::new(1), &cfg).expect_err("10 bytes cannot hold the header");
        assert_eq!(err.kind, crate::base::error::ErrorKind::Usage);
        assert!(err.message.contains("20"), "names the header size: {}", err.message);
    }

    #[test]
    fn refused_port_is_counted_not_fatal() {
        // A port nobody listens on: loopback answers with ICMP port unreachable.
        let closed = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let target = closed.local_addr().expect("addr");
        drop(closed);
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket.connect(target).expect("connect");
        let cfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len: 200,
            gso: false,
            inflight: 1,
            deadline: Instant::now() + Duration::from_millis(200),
            halt: None,
            rate_bps: 8 * 200 * 1000, // 1000 datagrams/s: room for the ICMP errors to come back
            burst: 0,
            max_datagrams: 50,
            drain_limit: Duration::from_millis(200),
            fin: Some(FinConfig { copies: 2, interval: Duration::from_millis(1), await_report: Duration::ZERO }),
            refused: None,
        };
        let result = run(vec![UdpSendFlow { socket, queue: 0 }], &QueueCounters::new(1), &cfg).expect("runs");
        let flow = &result.flows[0];
        assert!(flow.error.is_none(), "ECONNREFUSED is not fatal: {:?}", flow.error);
        assert!(flow.refused > 0, "refusals are counted: {flow:?}");
        assert_eq!(flow.datagrams + flow.abandoned, flow.next_seq - 1, "every number sent or abandoned: {flow:?}");
        assert_eq!(result.path, SendPath::PerDatagram);
    }

    #[test]
    fn a_thread_shares_its_rate_among_its_flows() {
        // Two flows on one thread, paced: each gets about half, none starves (filling the
        // first flow's slots first once gave it the whole rate).
        let sinks: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind")).collect();
        let flows = sinks
            .iter()
            .enumerate()
            .map(|(q, sink)| {
                let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
                socket.connect(sink.local_addr().expect("addr")).expect("connect");
                UdpSendFlow { socket, queue: q as u32 }
            })
            .collect();
        let cfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len: 200,
            gso: true,
            inflight: 8,
            deadline: Instant::now() + Duration::from_millis(300),
            halt: None,
            rate_bps: 8 * 200 * 2000, // 2000 datagrams/s for the thread
            burst: 0,
            max_datagrams: 0,
            drain_limit: Duration::from_millis(200),
            fin: None,
            refused: None,
        };
        let result = run(flows, &QueueCounters::new(2), &cfg).expect("runs");
        let (a, b) = (result.flows[0].datagrams, result.flows[1].datagrams);
        assert!(a + b >= 300, "the thread sent at its rate: {a} + {b}");
        assert!(a.abs_diff(b) * 10 <= a + b, "the flows shared it evenly: {a} and {b}");
    }
}
