//! The sending queue thread: keeps `depth` sends in flight on every flow it owns.
//!
//! The payload is one page-aligned buffer shared by all sends of the thread. Copying sends
//! never need it back, and zero-copy sends only read it, so nothing is ever rewritten while
//! the kernel holds it and the buffer stays hot in cache.

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::transport::pace::Pacer;
use crate::transport::stopping::Stopping;
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, push, wait_for_completions, AlignedBuf, RingPaths, WaitMode, WakeBatch};
use crate::uring::user_data::{UserData, TCP_SEND};
use io_uring::{cqueue, opcode, types, IoUring};
use serde::{Deserialize, Serialize};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `IORING_SEND_ZC_REPORT_USAGE`: ask the kernel whether it copied anyway (the crate keeps
/// its `sys` module private; value from the kernel's io_uring UAPI).
const SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`, set in a notification's `res` when the data was copied.
const NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// Payload byte: ASCII '0', as iperf2 fills its own. Its first 32-bit word carries none of the
/// iperf2 header flags (`b & 0xC4 == 0`), so an unmodified `iperf -s` just counts the bytes.
pub(crate) const PAYLOAD_FILL: u8 = b'0';

/// One flow handed to a sending thread.
pub struct SendFlow {
    pub stream: TcpStream,
    pub queue: u32,
    /// Bytes this flow sends in all (`-n`); `None`: until the deadline.
    pub budget: Option<u64>,
}

/// How a sending thread runs.
#[derive(Debug, Clone)]
pub struct SendWorkerConfig {
    pub wait: WaitMode,
    /// The fast paths the thread's ring is built with.
    pub ring: RingPaths,
    /// Completions to gather per wake-up when sleeping.
    pub batch: WakeBatch,
    pub len: u32,
    pub depth: u32,
    pub zerocopy: bool,
    /// Stop issuing new sends at this instant.
    pub deadline: Instant,
    /// Raised to stop before the deadline (the test was stopped early).
    pub halt: Option<Arc<AtomicBool>>,
    /// This thread's share of `--rate` in bits/s; 0 = unlimited.
    pub rate_bps: u64,
    /// Sends back to back before the rate is checked (`-b RATE/N`); 0: none.
    pub burst: u32,
    /// How long in-flight sends may take to complete after the deadline.
    pub drain_limit: Duration,
}

/// What the kernel did with zero-copy sends.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ZeroCopyCounts {
    pub sends: u64,
    pub notifications: u64,
    /// Notifications flagged `IORING_NOTIF_USAGE_ZC_COPIED`: the kernel copied after all.
    pub copied: u64,
}

impl ZeroCopyCounts {
    pub(crate) fn merge(&mut self, other: &ZeroCopyCounts) {
        self.sends += other.sends;
        self.notifications += other.notifications;
        self.copied += other.copied;
    }
}

/// Result of one sending thread.
#[derive(Debug, Clone, Default)]
pub struct SendWorkerResult {
    pub flows: Vec<FlowOutcome>,
    pub zerocopy: ZeroCopyCounts,
    /// Set when zero-copy was asked for but registering the buffer failed (memlock).
    pub note: Option<String>,
    /// Whether this thread really sent with SEND_ZC.
    pub zerocopy_used: bool,
    /// In-flight sends that had not completed when the drain limit ran out.
    pub stuck: u32,
}

/// A flow being sent on: its socket, its sends in flight and what it has sent so far.
struct TcpSendingFlow {
    stream: TcpStream,
    queue: u32,
    inflight: u32,
    /// Bytes of the sends in flight (as submitted).
    inflight_bytes: u64,
    bytes: u64,
    budget: Option<u64>,
    error: Option<String>,
}

impl TcpSendingFlow {
    /// The length of the next send: a whole message, or what is left of the budget.
    fn next_len(&self, len: u32) -> u32 {
        match self.budget {
            Some(b) => b.saturating_sub(self.bytes + self.inflight_bytes).min(u64::from(len)) as u32,
            None => len,
        }
    }
    fn done(&self) -> bool {
        self.error.is_some() || self.budget.is_some_and(|b| self.bytes >= b)
    }
}

/// A send's user data: the flow's index, and the length submitted (to account short sends).
fn send_tag(idx: usize, len: u32) -> u64 {
    TCP_SEND.pack(UserData { index: idx, len, ..UserData::default() })
}

// Drop order matters: the ring is declared first so it is torn down before the payload
// buffer it may still reference.
struct SendRing {
    ring: IoUring,
    payload: AlignedBuf,
}

/// One sending thread: its ring, its flows and what it counted.
struct Sender<'a> {
    cfg: &'a SendWorkerConfig,
    sr: SendRing,
    flows: Vec<TcpSendingFlow>,
    /// SEND_ZC in use (asked for, and the payload registered).
    zerocopy: bool,
    pacer: Pacer,
    /// Zero-copy sends whose notification has not arrived yet.
    notifs_pending: u64,
    last_activity: Instant,
    /// Completions of one reap, reused so the loop does not allocate.
    cqes: Vec<(u64, i32, u32)>,
    result: SendWorkerResult,
}

impl<'a> Sender<'a> {
    /// Set-up: the ring, the payload (registered for zero-copy when asked), the flows.
    fn new(flows: Vec<SendFlow>, cfg: &'a SendWorkerConfig) -> Result<Self> {
        let entries = (flows.len() as u32 * cfg.depth * 2).next_power_of_two().clamp(64, 4096);
        let payload = AlignedBuf::new(cfg.len as usize)?;
        // SAFETY: payload is a fresh mapping of at least len bytes.
        unsafe { std::ptr::write_bytes(payload.as_ptr(), PAYLOAD_FILL, payload.len()) };
        let sr = SendRing { ring: build_ring(entries, cfg.ring)?, payload };
        let mut result = SendWorkerResult::default();

        // Zero-copy needs the payload pinned: registered here, or pinned per send against the
        // same RLIMIT_MEMLOCK. If registration is refused, per-send pinning would fail too, so
        // the thread falls back to copying sends and says so.
        let mut zerocopy = cfg.zerocopy;
        if zerocopy {
            let iov = libc::iovec { iov_base: sr.payload.as_ptr().cast(), iov_len: sr.payload.len() };
            // SAFETY: the buffer outlives the ring (SendRing drop order).
            if let Err(e) = unsafe { sr.ring.submitter().register_buffers(&[iov]) } {
                zerocopy = false;
                result.note = Some(format!(
                    "zero-copy off: registering the {}-byte payload failed ({e}); raise RLIMIT_MEMLOCK (ulimit -l) or run with CAP_IPC_LOCK",
                    sr.payload.len()
                ));
            }
        }
        result.zerocopy_used = zerocopy;

        let flows = flows
            .into_iter()
            .map(|f| TcpSendingFlow {
                stream: f.stream,
                queue: f.queue,
                inflight: 0,
                inflight_bytes: 0,
                bytes: 0,
                budget: f.budget,
                error: None,
            })
            .collect();
        Ok(Self {
            cfg,
            sr,
            flows,
            zerocopy,
            pacer: Pacer::new(cfg.rate_bps, Instant::now()).in_bursts(cfg.burst, cfg.len),
            notifs_pending: 0,
            last_activity: Instant::now(),
            cqes: Vec::with_capacity(entries as usize),
            result,
        })
    }

    /// Issue: tops every flow up to `depth` sends in flight, as far as its budget and the rate
    /// allow. Returns the wait the pacer asks for when the rate stopped it.
    fn issue(&mut self, now: Instant) -> Result<Option<Duration>> {
        let cfg = self.cfg;
        for (idx, flow) in self.flows.iter_mut().enumerate() {
            while flow.error.is_none() && flow.inflight < cfg.depth {
                let len = flow.next_len(cfg.len);
                if len == 0 {
                    break; // The whole budget is in flight or sent.
                }
                if let Some(wait) = self.pacer.wait(now) {
                    return Ok(Some(wait));
                }
                let fd = types::Fd(flow.stream.as_raw_fd());
                let entry = if self.zerocopy {
                    let op = opcode::SendZc::new(fd, self.sr.payload.as_ptr(), len)
                        .zc_flags(SEND_ZC_REPORT_USAGE)
                        .buf_index(Some(0));
                    self.result.zerocopy.sends += 1;
                    op.build()
                } else {
                    opcode::Send::new(fd, self.sr.payload.as_ptr(), len).build()
                };
                // SAFETY: sr.payload is only read by the kernel and drops after sr.ring; the
                // flow's socket stays open until its sends complete.
                unsafe { push(&mut self.sr.ring, &entry.user_data(send_tag(idx, len))) }?;
                flow.inflight += 1;
                flow.inflight_bytes += u64::from(len);
                self.pacer.issue(u64::from(len));
            }
        }
        Ok(None)
    }

    /// Reap: takes every completion off the ring and accounts it.
    fn reap(&mut self, counters: &QueueCounters) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(self.sr.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        if !cqes.is_empty() {
            self.last_activity = Instant::now();
        }
        for &(ud, res, flags) in &cqes {
            self.account(ud, res, flags, counters);
        }
        self.cqes = cqes;
    }

    /// Account: a zero-copy notification goes to the tallies, a send's result to its flow
    /// (bytes sent, or the first error that ends it).
    #[inline]
    fn account(&mut self, ud: u64, res: i32, flags: u32, counters: &QueueCounters) {
        if cqueue::notif(flags) {
            self.notifs_pending -= 1;
            self.result.zerocopy.notifications += 1;
            if (res as u32) & NOTIF_USAGE_ZC_COPIED != 0 {
                self.result.zerocopy.copied += 1;
            }
            return;
        }
        if cqueue::more(flags) {
            self.notifs_pending += 1;
        }
        let ud = TCP_SEND.unpack(ud);
        let flow = &mut self.flows[ud.index];
        flow.inflight -= 1;
        flow.inflight_bytes -= u64::from(ud.len);
        if res > 0 {
            flow.bytes += res as u64;
            counters.add(flow.queue as usize, res as u64);
        } else if res < 0 && res != -libc::EAGAIN && res != -libc::EINTR && flow.error.is_none() {
            flow.error = Some(format!("send failed: {}", errno_text(res)));
        }
    }

    /// Tear down: half-closes the flows that are still fine (the receiver reads to EOF and
    /// knows it has every byte) and reports each flow; with sends stuck in the kernel, closes
    /// every socket first so they fail instead of completing into a ring about to go.
    fn finish(self) -> SendWorkerResult {
        let Sender { cfg, sr, flows, mut result, .. } = self;
        for flow in &flows {
            if flow.error.is_none() {
                let _ = flow.stream.shutdown(Shutdown::Write);
            }
        }
        if result.stuck > 0 {
            for flow in &flows {
                let _ = flow.stream.shutdown(Shutdown::Both);
            }
        }
        result.flows =
            flows.into_iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.bytes, error: f.error }).collect();
        if result.stuck > 0 {
            for f in result.flows.iter_mut().filter(|f| f.error.is_none()) {
                f.error = Some(format!(
                    "sends did not complete within {:.1} s of the end: the receiver stopped reading, or this host ran short of TCP memory (net.ipv4.tcp_mem)",
                    cfg.drain_limit.as_secs_f64()
                ));
            }
        }
        drop(sr);
        result
    }
}

/// Runs one sending thread until `cfg.deadline`, then drains and half-closes every flow.
pub fn run(flows: Vec<SendFlow>, counters: &QueueCounters, cfg: &SendWorkerConfig) -> Result<SendWorkerResult> {
    let mut s = Sender::new(flows, cfg)?;
    let mut stop = Stopping::new(cfg.deadline, cfg.halt.clone(), cfg.drain_limit);
    loop {
        let now = Instant::now();
        let stopping = stop.check(now);
        let pace_wait = if stopping { None } else { s.issue(now)? };
        let inflight: u32 = s.flows.iter().map(|f| f.inflight).sum();
        // Every flow failed or sent its whole budget (`-n`).
        let all_failed = s.flows.iter().all(TcpSendingFlow::done);
        if inflight == 0 && s.notifs_pending == 0 && (stopping || all_failed) {
            break;
        }
        if stop.drain_over(now) {
            s.result.stuck = inflight;
            break;
        }
        let limit = stop.wait_limit(now, pace_wait);
        wait_for_completions(&mut s.sr.ring, cfg.wait, s.last_activity, limit, cfg.batch)?;
        s.reap(counters);
    }
    Ok(s.finish())
}
