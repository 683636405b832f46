//! The AF_XDP sending queue thread: writes whole frames into its UMEM and hands them to the
//! TX ring, reclaiming them from the completion ring.
//!
//! Each frame is one UDP datagram of a flow, built from the flow's [`FrameTemplate`] with the
//! same sequence/timestamp header as the io_uring UDP engine, so any uringbench receiver (or
//! iperf2) accounts it. Frames of a thread's flows are interleaved round-robin. The UMEM is
//! fresh anonymous memory, so the payload filler is zero from the start and only headers are
//! written per frame.
//!
//! In copy mode (veth, drivers without AF_XDP) the kernel transmits at most 32 frames per
//! `sendto` (the kernel's `TX_BATCH_SIZE`), so the loop produces batches of that size and
//! kicks the kernel after each one whenever the ring asks for a wake-up.

use crate::metrics::measure::QueueCounters;
use crate::sys::xdp::socket::{BindMode, SocketCounters, XskQueue};
use crate::transport::pace::Pacer;
use crate::transport::stopping::Stopping;
use crate::wire::frame::FrameTemplate;
use crate::wire::udp_payload::{WireTime, FIRST_SEQ};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xsk_rs::umem::frame::FrameDesc;

/// Frames per produce/kick: the kernel's copy-mode transmit batch.
pub(crate) const BATCH: usize = 32;

/// One flow: its frame template and the queue it is counted under.
pub struct XdpSendFlow {
    pub template: FrameTemplate,
    /// The test's queue index (for the per-queue byte counters).
    pub queue: u32,
}

/// One NIC queue's socket and the flows sent through it.
pub struct XdpSendQueue {
    pub xsk: XskQueue,
    pub flows: Vec<XdpSendFlow>,
}

/// How a sending thread runs.
#[derive(Debug, Clone)]
pub struct XdpSendConfig {
    /// UDP payload bytes per datagram (what the byte counters count).
    pub len: u32,
    /// Stop sending data at this instant, then send the FINs.
    pub deadline: Instant,
    /// Raised to stop before the deadline (the test was stopped): the FINs follow at once.
    pub halt: Option<Arc<AtomicBool>>,
    /// This thread's share of the offered rate in payload bits/s; 0 = unlimited.
    pub rate_bps: u64,
    /// Frames back to back before the rate is checked (`-b RATE/N`); 0: none.
    pub burst: u32,
    /// FIN copies per flow, and the time between two.
    pub fin_copies: u32,
    pub fin_interval: Duration,
    /// How long to wait for the kernel to complete the last frames.
    pub drain_limit: Duration,
    /// Spin instead of sleeping when the rings are full (a CPU of its own).
    pub spin: bool,
}

/// What one flow sent.
#[derive(Debug, Clone, Default)]
pub struct XdpFlowSent {
    pub queue: u32,
    /// Data datagrams handed to the TX ring (FINs not included).
    pub datagrams: u64,
    pub bytes: u64,
    /// Sequence number of the FIN (one past the last data datagram).
    pub fin_seq: u64,
    pub error: Option<String>,
}

/// Result of one sending thread.
#[derive(Debug, Clone)]
pub struct XdpSendResult {
    pub flows: Vec<XdpFlowSent>,
    /// Frames the kernel completed (data and FINs).
    pub completed: u64,
    /// Frames produced to the TX ring (data and FINs).
    pub produced: u64,
    /// `sendto` kicks.
    pub wakeups: u64,
    /// Times the TX ring or the UMEM had no room and the thread waited.
    pub ring_full: u64,
    pub sockets: SocketCounters,
    pub bind: BindMode,
    pub nic_queues: Vec<u32>,
    pub notes: Vec<String>,
}

struct QueueState {
    xsk: XskQueue,
    flows: Vec<XdpSendFlow>,
    sent: Vec<XdpFlowSent>,
    next_seq: Vec<u64>,
    free: Vec<FrameDesc>,
    scratch: Vec<FrameDesc>,
    /// Reused for each batch, so the loop does not allocate.
    batch: Vec<FrameDesc>,
    next_flow: usize,
    produced: u64,
    completed: u64,
    wakeups: u64,
    ring_full: u64,
}

impl QueueState {
    fn new(q: XdpSendQueue) -> Self {
        let mut xsk = q.xsk;
        let free = std::mem::take(&mut xsk.frames);
        let n = q.flows.len();
        Self {
            sent: q.flows.iter().map(|f| XdpFlowSent { queue: f.queue, ..XdpFlowSent::default() }).collect(),
            next_seq: vec![FIRST_SEQ; n],
            flows: q.flows,
            xsk,
            free,
            scratch: vec![FrameDesc::default(); BATCH * 2],
            batch: Vec::with_capacity(BATCH),
            next_flow: 0,
            produced: 0,
            completed: 0,
            wakeups: 0,
            ring_full: 0,
        }
    }

    /// Takes completed frames back into the free list.
    fn reclaim(&mut self) {
        loop {
            // SAFETY: completed frames are ours again; the descriptors are those of this UMEM.
            let n = unsafe { self.xsk.comp.consume(&mut self.scratch) };
            if n == 0 {
                return;
            }
            self.completed += n as u64;
            self.free.extend_from_slice(&self.scratch[..n]);
        }
    }

    fn kick(&mut self) {
        if self.xsk.tx.needs_wakeup() {
            self.wakeups += 1;
            // Errors that only mean "busy, try again" are already ignored by xsk-rs; any other
            // shows up as frames never completed.
            let _ = self.xsk.tx.wakeup();
        }
    }

    /// Writes and produces up to `want` frames. Returns data bytes queued per flow index.
    fn send_batch(&mut self, want: usize, counters: &QueueCounters, len: u32) -> usize {
        let k = want.min(self.free.len()).min(self.xsk.tx.nb_free(want as u32) as usize);
        if k == 0 || self.flows.is_empty() {
            return 0;
        }
        let now = WireTime::now();
        let at = self.free.len() - k;
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        batch.extend(self.free.drain(at..));
        for desc in batch.iter_mut() {
            let f = self.next_flow;
            self.next_flow = (self.next_flow + 1) % self.flows.len();
            let seq = self.next_seq[f];
            self.next_seq[f] += 1;
            let t = &self.flows[f].template;
            // SAFETY: the frame is free (not in any ring), so nothing else reads or writes it.
            let mut data = unsafe { self.xsk.umem.data_mut(desc) };
            data.cursor().set_pos(t.frame_len());
            t.write_headers(data.contents_mut(), seq, now, false);
            self.sent[f].datagrams += 1;
            self.sent[f].bytes += u64::from(len);
            counters.add(self.flows[f].queue as usize, u64::from(len));
        }
        // SAFETY: the frames were written above and are not used again until completed.
        let n = unsafe { self.xsk.tx.produce(&batch) };
        debug_assert_eq!(n, k, "nb_free promised room for the batch");
        self.produced += n as u64;
        self.batch = batch;
        self.kick();
        k
    }

    /// Sends one FIN per flow; false when there was no free frame or ring room for them all.
    fn send_fins(&mut self) -> bool {
        let n = self.flows.len();
        if self.free.len() < n || (self.xsk.tx.nb_free(n as u32) as usize) < n {
            return false;
        }
        let now = WireTime::now();
        let at = self.free.len() - n;
        let mut batch: Vec<FrameDesc> = self.free.drain(at..).collect();
        for (f, desc) in batch.iter_mut().enumerate() {
            let t = &self.flows[f].template;
            self.sent[f].fin_seq = self.next_seq[f];
            // SAFETY: as in send_batch: a free frame of this UMEM.
            let mut data = unsafe { self.xsk.umem.data_mut(desc) };
            data.cursor().set_pos(t.frame_len());
            t.write_headers(data.contents_mut(), self.next_seq[f], now, true);
        }
        // SAFETY: as in send_batch.
        self.produced += unsafe { self.xsk.tx.produce(&batch) } as u64;
        self.kick();
        true
    }
}

/// Waits until the kernel completed every frame produced on each socket, or `until`.
fn drain(states: &mut [QueueState], until: Instant) {
    for st in states.iter_mut() {
        while st.completed < st.produced && Instant::now() < until {
            st.kick();
            std::thread::sleep(Duration::from_micros(100));
            st.reclaim();
        }
    }
}

/// FINs: a few copies per flow, so one lost FIN does not leave the receiver waiting; each
/// waits for room in the rings until `until`.
fn send_fins(states: &mut [QueueState], cfg: &XdpSendConfig, until: Instant) {
    for copy in 0..cfg.fin_copies {
        for st in states.iter_mut() {
            while !st.send_fins() && Instant::now() < until {
                st.reclaim();
                st.kick();
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        if copy + 1 < cfg.fin_copies {
            std::thread::sleep(cfg.fin_interval);
        }
    }
}

/// Runs one sending thread over its queues until the deadline, then sends the FINs and waits
/// for the kernel to complete what it was given.
pub fn run(queues: Vec<XdpSendQueue>, counters: &QueueCounters, cfg: &XdpSendConfig) -> XdpSendResult {
    let nic_queues: Vec<u32> = queues.iter().map(|q| q.xsk.queue).collect();
    let mut notes: Vec<String> = queues.iter().filter_map(|q| q.xsk.note.clone()).collect();
    notes.dedup();
    let bind = queues.first().map_or(BindMode::Copy, |q| q.xsk.bind);
    let mut states: Vec<QueueState> = queues.into_iter().map(QueueState::new).collect();
    let mut pacer = Pacer::new(cfg.rate_bps, Instant::now()).in_bursts(cfg.burst, cfg.len);
    let mut stopping = Stopping::new(cfg.deadline, cfg.halt.clone(), cfg.drain_limit);
    loop {
        let now = Instant::now();
        if stopping.check(now) {
            break;
        }
        let budget = match pacer.budget(now, u64::from(cfg.len), BATCH as u64) {
            Ok(n) => n as usize,
            Err(wait) => {
                if cfg.spin || wait < Duration::from_micros(50) {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(wait.min(Duration::from_millis(1)));
                }
                continue;
            }
        };
        let mut progressed = 0;
        for st in states.iter_mut() {
            st.reclaim();
            let n = st.send_batch(budget, counters, cfg.len);
            if n == 0 {
                st.ring_full += 1;
                // Frames may be waiting in the TX ring for a kick (copy mode sends 32 per call).
                st.kick();
            }
            progressed += n;
        }
        pacer.issue(progressed as u64 * u64::from(cfg.len));
        if progressed == 0 && !cfg.spin {
            // Completions come back as the peer consumes; give the CPU away briefly.
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    // Let the kernel finish the data first: a receiver that fell behind drops whatever comes
    // while its ring is full, and a FIN right behind the data would be dropped with it (the
    // receiver then waits for the deadline and cannot count the losses at the tail).
    let drain_end = Instant::now() + cfg.drain_limit;
    drain(&mut states, drain_end);
    std::thread::sleep(cfg.fin_interval);
    send_fins(&mut states, cfg, drain_end);
    // Drain: every produced frame should come back through the completion ring.
    drain(&mut states, drain_end);
    let mut sockets = SocketCounters::default();
    for st in &states {
        sockets.add(&st.xsk.counters());
    }
    let not_completed: u64 = states.iter().map(|s| s.produced - s.completed.min(s.produced)).sum();
    if not_completed > 0 {
        notes.push(format!(
            "{not_completed} frames were still in the TX ring {:.1} s after the end (never transmitted)",
            cfg.drain_limit.as_secs_f64()
        ));
    }
    let mut result = XdpSendResult {
        flows: Vec::new(),
        completed: states.iter().map(|s| s.completed).sum(),
        produced: states.iter().map(|s| s.produced).sum(),
        wakeups: states.iter().map(|s| s.wakeups).sum(),
        ring_full: states.iter().map(|s| s.ring_full).sum(),
        sockets,
        bind,
        nic_queues,
        notes,
    };
    if not_completed > 0 {
        for st in states.iter_mut() {
            for f in st.sent.iter_mut() {
                f.error = Some("frames left untransmitted in the TX ring at the end".into());
            }
        }
    }
    result.flows = states.into_iter().flat_map(|s| s.sent).collect();
    result
}
