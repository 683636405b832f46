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
    pub stop: Arc<AtomicBool>,
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

/// Runs one receiving thread until the stop flag, then drains its RX rings and returns. The
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
    let index: HashMap<(IpAddr, u16), usize> =
        flows.iter().enumerate().map(|(i, f)| ((f.src.to_canonical(), f.src_port), i)).collect();
    let mut trackers: Vec<SeqTracker> = flows
        .iter()
        .map(|_| if cfg.one_way_delay { SeqTracker::with_one_way_delay() } else { SeqTracker::new() })
        .collect();
    let mut touched = vec![false; flows.len()];
    let mut batch_bytes = vec![0u64; flows.len()];
    let mut last: Option<((IpAddr, u16), usize)> = None;
    let mut states: Vec<QueueState> = queues.into_iter().map(QueueState::new).collect();
    // A spinning thread also has the kernel busy-poll its queues' NAPI from its polls.
    let mut busy_poll = false;
    if cfg.spin {
        let refused: Vec<String> =
            states.iter().filter_map(|st| st.xsk.enable_busy_poll(BUSY_POLL_US, BUSY_POLL_BUDGET).err()).collect();
        busy_poll = refused.is_empty();
        result.notes.push(match refused.first() {
            None => {
                format!("busy polling: SO_PREFER_BUSY_POLL, SO_BUSY_POLL {BUSY_POLL_US} us, budget {BUSY_POLL_BUDGET}")
            }
            Some(e) => format!("busy polling refused ({e}): spinning on the rings only"),
        });
    }
    let mut descs = vec![FrameDesc::default(); BATCH];
    let mut last_publish = Instant::now();
    let mut draining = false;
    loop {
        let mut got = 0;
        for st in states.iter_mut() {
            // SAFETY: descriptors filled by consume belong to this UMEM.
            let n = unsafe { st.xsk.rx.consume(&mut descs) };
            if n == 0 {
                continue;
            }
            got += n;
            result.frames += n as u64;
            let arrived = WireTime::now();
            for desc in &descs[..n] {
                // SAFETY: the frame came off the RX ring: the kernel is done with it until we
                // put it in the fill ring below.
                let data = unsafe { st.xsk.umem.data(desc) };
                let parsed = match parse_udp(data.contents()) {
                    Ok(p) if p.dst_port == cfg.dst_port => p,
                    Ok(_) | Err(FrameError::NotUdp) | Err(FrameError::Truncated) | Err(FrameError::BadChecksum) => {
                        result.malformed += 1;
                        continue;
                    }
                };
                // Frames of one flow come in runs: skip the hash lookup while the flow repeats.
                let key = (parsed.src, parsed.src_port);
                let f = match last {
                    Some((k, f)) if k == key => f,
                    _ => match index.get(&(key.0.to_canonical(), key.1)) {
                        Some(&f) => {
                            last = Some((key, f));
                            f
                        }
                        None => {
                            result.strangers += 1;
                            continue;
                        }
                    },
                };
                if parsed.checksum == UdpChecksum::LeftToOffload {
                    result.checksum_unverified += 1;
                }
                match payload::decode(parsed.payload) {
                    None => result.foreign += 1,
                    Some(d) if d.fin => {
                        trackers[f].record_fin(d.seq);
                        cfg.fins[f].store(true, Ordering::Relaxed);
                    }
                    Some(d) => {
                        let len = parsed.payload.len() as u32;
                        trackers[f].record(d.seq, len, d.sent, arrived);
                        batch_bytes[f] += u64::from(len);
                    }
                }
                touched[f] = true;
            }
            st.refill(&descs[..n]);
            // One atomic add per flow and batch, not per frame.
            for (f, bytes) in batch_bytes.iter_mut().enumerate().filter(|(_, b)| **b > 0) {
                counters.add(flows[f].queue as usize, *bytes);
                *bytes = 0;
            }
        }
        let now = Instant::now();
        if got > 0 {
            cfg.activity.store(now.duration_since(cfg.epoch).as_nanos() as u64, Ordering::Relaxed);
        }
        if now.duration_since(last_publish) >= PUBLISH_EVERY {
            publish(flows, &trackers, &mut touched);
            last_publish = now;
        }
        if draining {
            if got == 0 {
                break;
            }
            continue;
        }
        if cfg.stop.load(Ordering::Relaxed) {
            draining = true;
            continue;
        }
        if got == 0 {
            result.polls += 1;
            for st in states.iter_mut() {
                // With busy polling, the poll itself runs the NAPI that fills the RX ring.
                if busy_poll || st.xsk.fill.needs_wakeup() {
                    // Copy mode on most drivers, and zero-copy with need_wakeup: the kernel
                    // refills only after a poll/recvfrom on the socket.
                    let _ = st.xsk.fill.wakeup(st.xsk.rx.fd_mut(), 0);
                }
            }
            if !cfg.spin {
                // One socket: sleep in poll until frames arrive (1 ms cap to watch the end).
                if let [st] = states.as_mut_slice() {
                    let _ = st.xsk.rx.poll(1);
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
    touched.iter_mut().for_each(|t| *t = true);
    publish(flows, &trackers, &mut touched);
    for st in &states {
        result.sockets.add(&st.xsk.counters());
    }
    result.flows = trackers.iter().map(SeqTracker::stats).collect();
    result
}

fn publish(flows: &[XdpRecvFlow], trackers: &[SeqTracker], touched: &mut [bool]) {
    for (i, flow) in flows.iter().enumerate() {
        if touched[i] {
            if let Some(live) = &flow.live {
                *live.lock().unwrap_or_else(|p| p.into_inner()) = trackers[i].stats();
            }
            touched[i] = false;
        }
    }
}
