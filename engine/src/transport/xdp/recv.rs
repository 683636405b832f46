//! The AF_XDP receiving queue thread: takes frames the XDP program redirected to its socket
//! off the RX ring, checks and accounts them, and gives the buffers back through the fill ring.
//!
//! A frame counts as a datagram of flow *i* when it is valid IPv4/IPv6 UDP (header and UDP
//! checksums verified), comes from the sender's address and flow *i*'s source port, and goes
//! to the test's port. Its payload feeds the flow's [`SeqTracker`], exactly as the socket
//! receiver does, so loss, reordering, duplicates and jitter mean the same in both engines.
//! Anything else redirected to us is counted by kind (strangers, malformed, foreign) and
//! shown in the report.
//!
//! Every flow is tracked by every thread: RSS normally puts a flow on one queue, but nothing
//! here depends on it; the session merges the threads' figures per flow.

use crate::metrics::measure::QueueCounters;
use crate::metrics::seq::LiveStats;
use crate::metrics::seq::{SeqStats, SeqTracker};
use crate::sys::xdp::socket::{BindMode, SocketCounters, XskQueue};
use crate::wire::frame::{parse_udp, FrameError, UdpChecksum};
use crate::wire::udp_payload::{self as payload, WireTime};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xsk_rs::umem::frame::FrameDesc;

/// Descriptors taken off the RX ring per call.
const BATCH: usize = 64;
/// How often live figures are published for the interval sampler.
const PUBLISH_EVERY: Duration = Duration::from_millis(10);

/// One expected flow: where its datagrams come from, the test queue it counts under, and
/// where its live figures go.
#[derive(Clone)]
pub struct XdpRecvFlow {
    pub src: IpAddr,
    pub src_port: u16,
    pub queue: u32,
    /// One per (thread, flow): the sampler sums them all.
    pub live: Option<LiveStats>,
}

/// Busy-poll time and budget per poll of a spinning receiver's sockets.
const BUSY_POLL_US: u32 = 20;
const BUSY_POLL_BUDGET: u32 = 64;

/// How a receiving thread runs.
#[derive(Clone)]
pub struct XdpRecvConfig {
    pub dst_port: u16,
    pub one_way_delay: bool,
    /// Raised by the session once the program is detached: read what is left in the RX
    /// rings, then return. The session decides the end (every FIN seen and a moment of
    /// silence, or its deadline) from `fins` and `activity`.
    pub halt: Arc<AtomicBool>,
    /// Per flow, set by whichever thread sees the flow's FIN.
    pub fins: Arc<Vec<AtomicBool>>,
    /// When frames last arrived, in nanoseconds since `epoch`, from any thread.
    pub activity: Arc<AtomicU64>,
    pub epoch: Instant,
    /// Spin on the RX ring instead of sleeping in poll (a CPU of its own).
    pub spin: bool,
}

/// What one thread counted.
#[derive(Debug, Clone, Default)]
pub struct XdpRecvResult {
    /// Per flow, in flow order.
    pub flows: Vec<SeqStats>,
    /// Frames taken off the RX rings.
    pub frames: u64,
    /// Valid UDP to the test port from an address or port that is not one of the test's flows.
    pub strangers: u64,
    /// Frames that failed the checks (truncated, bad checksum, not UDP).
    pub malformed: u64,
    /// Test-port datagrams too short for the sequence header, or with id 0.
    pub foreign: u64,
    /// Accounted datagrams whose UDP checksum the sender left to an offload that never ran
    /// (kernel senders over veth): not verifiable.
    pub checksum_unverified: u64,
    pub sockets: SocketCounters,
    pub polls: u64,
    pub bind: Option<BindMode>,
    pub nic_queues: Vec<u32>,
    pub notes: Vec<String>,
}

struct QueueState {
    xsk: XskQueue,
    /// Frames not in the fill ring (the fill ring is smaller than the UMEM).
    spare: Vec<FrameDesc>,
}

impl QueueState {
    /// Takes a socket whose fill ring was primed ([`XskQueue::prime_fill`]); the frames left
    /// over are the spares.
    fn new(mut xsk: XskQueue) -> Self {
        let spare = std::mem::take(&mut xsk.frames);
        Self { xsk, spare }
    }

    /// Gives frames back to the kernel: the just-read ones, topped up from the spares.
    fn refill(&mut self, used: &[FrameDesc]) {
        self.spare.extend_from_slice(used);
        let room = self.xsk.fill.nb_free(self.spare.len() as u32) as usize;
        let k = room.min(self.spare.len());
        if k > 0 {
            let at = self.spare.len() - k;
            // SAFETY: spare frames were consumed from the RX ring (or never given out): ours.
            let n = unsafe { self.xsk.fill.produce(&self.spare[at..]) };
            if n == k {
                self.spare.truncate(at);
            }
        }
    }
}

/// The test's flows as one receiving thread sees them, and what it counted.
struct Accounts<'a> {
    flows: &'a [XdpRecvFlow],
    dst_port: u16,
    /// (source address, source port) to flow index.
    index: HashMap<(IpAddr, u16), usize>,
    trackers: Vec<SeqTracker>,
    /// Flows with news since the last publish.
    touched: Vec<bool>,
    /// Data bytes per flow in the batch being read (one atomic add per flow and batch).
    batch_bytes: Vec<u64>,
    /// The flow of the previous frame: frames of one flow come in runs.
    last: Option<((IpAddr, u16), usize)>,
    result: XdpRecvResult,
}

impl<'a> Accounts<'a> {
    fn new(flows: &'a [XdpRecvFlow], cfg: &XdpRecvConfig, result: XdpRecvResult) -> Self {
        Self {
            flows,
            dst_port: cfg.dst_port,
            index: flows.iter().enumerate().map(|(i, f)| ((f.src.to_canonical(), f.src_port), i)).collect(),
            trackers: flows
                .iter()
                .map(|_| if cfg.one_way_delay { SeqTracker::with_one_way_delay() } else { SeqTracker::new() })
                .collect(),
            touched: vec![false; flows.len()],
            batch_bytes: vec![0u64; flows.len()],
            last: None,
            result,
        }
    }

    /// The flow a datagram from `key` belongs to, if any.
    #[inline]
    fn flow_of(&mut self, key: (IpAddr, u16)) -> Option<usize> {
        // Skip the hash lookup while the flow repeats.
        match self.last {
            Some((k, f)) if k == key => Some(f),
            _ => {
                let f = *self.index.get(&(key.0.to_canonical(), key.1))?;
                self.last = Some((key, f));
                Some(f)
            }
        }
    }

    /// Account: checks one frame and credits it to its flow (data to the tracker, a FIN to
    /// the flow's flag), or counts it by what is wrong with it.
    #[inline]
    fn frame(&mut self, frame: &[u8], arrived: WireTime, fins: &[AtomicBool]) {
        let parsed = match parse_udp(frame) {
            Ok(p) if p.dst_port == self.dst_port => p,
            Ok(_) | Err(FrameError::NotUdp) | Err(FrameError::Truncated) | Err(FrameError::BadChecksum) => {
                self.result.malformed += 1;
                return;
            }
        };
        let Some(f) = self.flow_of((parsed.src, parsed.src_port)) else {
            self.result.strangers += 1;
            return;
        };
        if parsed.checksum == UdpChecksum::LeftToOffload {
            self.result.checksum_unverified += 1;
        }
        match payload::decode(parsed.payload) {
            None => self.result.foreign += 1,
            Some(d) if d.fin => {
                self.trackers[f].record_fin(d.seq);
                fins[f].store(true, Ordering::Relaxed);
            }
            Some(d) => {
                let len = parsed.payload.len() as u32;
                self.trackers[f].record(d.seq, len, d.sent, arrived);
                self.batch_bytes[f] += u64::from(len);
            }
        }
        self.touched[f] = true;
    }

    /// Adds the batch's data bytes to the queue counters.
    #[inline]
    fn flush(&mut self, counters: &QueueCounters) {
        for (f, bytes) in self.batch_bytes.iter_mut().enumerate().filter(|(_, b)| **b > 0) {
            counters.add(self.flows[f].queue as usize, *bytes);
            *bytes = 0;
        }
    }

    /// Publishes the figures of the flows with news for the interval sampler.
    fn publish(&mut self) {
        for (i, flow) in self.flows.iter().enumerate() {
            if self.touched[i] {
                if let Some(live) = &flow.live {
                    *live.lock().unwrap_or_else(|p| p.into_inner()) = self.trackers[i].stats();
                }
                self.touched[i] = false;
            }
        }
    }
}

/// Reap: takes what each socket's RX ring holds, accounts it and gives the frames back.
/// Returns the frames taken.
fn take_frames(
    states: &mut [QueueState],
    descs: &mut [FrameDesc],
    acc: &mut Accounts,
    counters: &QueueCounters,
    fins: &[AtomicBool],
) -> usize {
    let mut got = 0;
    for st in states.iter_mut() {
        // SAFETY: descriptors filled by consume belong to this UMEM.
        let n = unsafe { st.xsk.rx.consume(descs) };
        if n == 0 {
            continue;
        }
        got += n;
        acc.result.frames += n as u64;
        let arrived = WireTime::now();
        for desc in &descs[..n] {
            // SAFETY: the frame came off the RX ring: the kernel is done with it until we
            // put it in the fill ring below.
            let data = unsafe { st.xsk.umem.data(desc) };
            acc.frame(data.contents(), arrived, fins);
        }
        st.refill(&descs[..n]);
        acc.flush(counters);
    }
    got
}

/// Set-up of a spinning thread: the kernel busy-polls its queues' NAPI from its polls too.
/// Returns whether every socket took it, with a note either way.
fn enable_busy_poll(states: &mut [QueueState], notes: &mut Vec<String>) -> bool {
    let refused: Vec<String> =
        states.iter().filter_map(|st| st.xsk.enable_busy_poll(BUSY_POLL_US, BUSY_POLL_BUDGET).err()).collect();
    notes.push(match refused.first() {
        None => format!("busy polling: SO_PREFER_BUSY_POLL, SO_BUSY_POLL {BUSY_POLL_US} us, budget {BUSY_POLL_BUDGET}"),
        Some(e) => format!("busy polling refused ({e}): spinning on the rings only"),
    });
    refused.is_empty()
}

/// Nothing arrived: wakes the kernel where it waits for a poll, then sleeps briefly unless
/// the thread spins.
fn idle(states: &mut [QueueState], busy_poll: bool, spin: bool) {
    for st in states.iter_mut() {
        // With busy polling, the poll itself runs the NAPI that fills the RX ring.
        if busy_poll || st.xsk.fill.needs_wakeup() {
            // Copy mode on most drivers, and zero-copy with need_wakeup: the kernel
            // refills only after a poll/recvfrom on the socket.
            let _ = st.xsk.fill.wakeup(st.xsk.rx.fd_mut(), 0);
        }
    }
    if !spin {
        // One socket: sleep in poll until frames arrive (1 ms cap to watch the end).
        if let [st] = states {
            let _ = st.xsk.rx.poll(1);
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Runs one receiving thread until the halt flag, then drains its RX rings and returns. The
/// session raises the flag only after detaching the program, so every frame the program
/// redirected is read here or counted by the socket (`rx_ring_full`, `rx_dropped`).
pub fn run(
    queues: Vec<XskQueue>,
    flows: &[XdpRecvFlow],
    counters: &QueueCounters,
    cfg: &XdpRecvConfig,
) -> XdpRecvResult {
    let mut result = XdpRecvResult {
        nic_queues: queues.iter().map(|q| q.queue).collect(),
        bind: queues.first().map(|q| q.bind),
        notes: queues.iter().filter_map(|q| q.note.clone()).collect(),
        ..XdpRecvResult::default()
    };
    result.notes.dedup();
    let mut states: Vec<QueueState> = queues.into_iter().map(QueueState::new).collect();
    let busy_poll = cfg.spin && enable_busy_poll(&mut states, &mut result.notes);
    let mut acc = Accounts::new(flows, cfg, result);
    let mut descs = vec![FrameDesc::default(); BATCH];
    let mut last_publish = Instant::now();
    let mut draining = false;
    loop {
        let got = take_frames(&mut states, &mut descs, &mut acc, counters, &cfg.fins);
        let now = Instant::now();
        if got > 0 {
            cfg.activity.store(now.duration_since(cfg.epoch).as_nanos() as u64, Ordering::Relaxed);
        }
        if now.duration_since(last_publish) >= PUBLISH_EVERY {
            acc.publish();
            last_publish = now;
        }
        if draining {
            if got == 0 {
                break;
            }
            continue;
        }
        if cfg.halt.load(Ordering::Relaxed) {
            draining = true;
            continue;
        }
        if got == 0 {
            acc.result.polls += 1;
            idle(&mut states, busy_poll, cfg.spin);
        }
    }
    // Tear down: every flow's figures published one last time, the sockets' counters read.
    acc.touched.iter_mut().for_each(|t| *t = true);
    acc.publish();
    let mut result = acc.result;
    for st in &states {
        result.sockets.add(&st.xsk.counters());
    }
    result.flows = acc.trackers.iter().map(SeqTracker::stats).collect();
    result
}
