//! The receiving queue thread: one multishot receive per flow over a shared buffer ring.
//!
//! Each flow has one multishot `RECV` armed (bundles where the kernel has them, so one
//! completion carries many buffers). The payload is counted, never read, and its buffers go
//! straight back to the ring. A multishot request ends when the ring runs dry (ENOBUFS, or
//! a bundle completion without `F_MORE`); any completion without `F_MORE` that is not EOF
//! or a hard error re-arms it (the kernel may end a multishot receive at any time).

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, push, wait_for_completions, BufRing, RingPaths, WaitMode, Waited, WakeBatch};
use io_uring::{cqueue, opcode, types, IoUring};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One flow handed to a receiving thread.
pub struct RecvFlow {
    pub stream: TcpStream,
    pub queue: u32,
}

/// How a receiving thread runs.
#[derive(Debug, Clone)]
pub struct RecvWorkerConfig {
    pub wait: WaitMode,
    /// The fast paths the thread's ring is built with.
    pub ring: RingPaths,
    /// Completions to gather per wake-up when sleeping.
    pub batch: WakeBatch,
    /// Buffers in the provided-buffer ring (power of two).
    pub buf_count: u16,
    pub buf_size: u32,
    /// Use `IORING_RECVSEND_BUNDLE` (kernel feature probed by the caller).
    pub bundle: bool,
    /// `SO_RCVLOWAT` for every flow: the kernel signals the socket readable (and so queues
    /// the multishot receive) only once this many bytes wait.
    pub rcvlowat: Option<u32>,
    /// Raised by the session when the test must end regardless of the flows.
    pub halt: Arc<AtomicBool>,
    /// Receive with MSG_TRUNC: the kernel counts and discards the payload without copying
    /// it into the buffer ring (`--skip-rx-copy`).
    pub skip_copy: bool,
}

/// Result of one receiving thread.
#[derive(Debug, Clone, Default)]
pub struct RecvWorkerResult {
    pub flows: Vec<FlowOutcome>,
    /// Receive completions seen; bytes ÷ completions shows how well bundling batched.
    pub completions: u64,
    /// Times a multishot receive had to be re-armed (ring ran dry or bundle ended).
    pub rearms: u64,
    /// Of `completions`, those found by polling the ring rather than after sleeping in the
    /// kernel: the thread's busy-poll share.
    pub polled_completions: u64,
}

/// A flow being received on: its socket and what it has received so far.
struct TcpReceivingFlow {
    stream: TcpStream,
    queue: u32,
    bytes: u64,
    open: bool,
    error: Option<String>,
}

// Field order is drop order: the ring goes before the buffers it may write into.
struct RecvRing {
    ring: IoUring,
    bufs: BufRing,
}

const BUF_GROUP: u16 = 0;

fn arm(ring: &mut IoUring, fd: i32, idx: usize, bundle: bool, skip_copy: bool) -> Result<()> {
    let flags = if skip_copy { libc::MSG_TRUNC } else { 0 };
    let entry = if bundle {
        opcode::RecvMultiBundle::new(types::Fd(fd), BUF_GROUP).flags(flags).build()
    } else {
        opcode::RecvMulti::new(types::Fd(fd), BUF_GROUP).flags(flags).build()
    };
    // SAFETY: a multishot receive into the provided-buffer ring, which the caller's RecvRing
    // drops after the ring; fd stays open until the flow's completions end.
    unsafe { push(ring, &entry.user_data(idx as u64)) }
}

fn set_rcvlowat(stream: &TcpStream, bytes: u32) -> Result<()> {
    let value = bytes as libc::c_int;
    // SAFETY: a valid socket fd and a c_int option value that lives across the call.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(crate::base::error::Error::io("setting SO_RCVLOWAT", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Runs until every flow reached EOF or failed, or `cfg.halt` is raised.
pub fn run(flows: Vec<RecvFlow>, counters: &QueueCounters, cfg: &RecvWorkerConfig) -> Result<RecvWorkerResult> {
    let entries = (flows.len() as u32 * 2).next_power_of_two().clamp(64, 4096);
    let ring = build_ring(entries, cfg.ring)?;
    let bufs = BufRing::register(&ring, BUF_GROUP, cfg.buf_count, cfg.buf_size)?;
    let mut rr = RecvRing { ring, bufs };
    let mut state: Vec<TcpReceivingFlow> = flows
        .into_iter()
        .map(|f| TcpReceivingFlow { stream: f.stream, queue: f.queue, bytes: 0, open: true, error: None })
        .collect();
    if let Some(lowat) = cfg.rcvlowat {
        for flow in &state {
            set_rcvlowat(&flow.stream, lowat)?;
        }
    }
    for (idx, flow) in state.iter().enumerate() {
        arm(&mut rr.ring, flow.stream.as_raw_fd(), idx, cfg.bundle, cfg.skip_copy)?;
    }
    let mut result = RecvWorkerResult::default();
    let mut open = state.len();
    let mut last_activity = Instant::now();
    let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(entries as usize * 4);

    while open > 0 && !cfg.halt.load(Ordering::Relaxed) {
        let waited =
            wait_for_completions(&mut rr.ring, cfg.wait, last_activity, Duration::from_millis(100), cfg.batch)?;
        cqes.clear();
        cqes.extend(rr.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        if cqes.is_empty() {
            continue;
        }
        if waited == Waited::Polled {
            result.polled_completions += cqes.len() as u64;
        }
        last_activity = Instant::now();
        for &(ud, res, flags) in &cqes {
            let idx = ud as usize;
            let flow = &mut state[idx];
            result.completions += 1;
            if res > 0 {
                flow.bytes += res as u64;
                counters.add(flow.queue as usize, res as u64);
                if let Some(bid) = cqueue::buffer_select(flags) {
                    rr.bufs.recycle(bid, res as u32);
                }
                if !cqueue::more(flags) {
                    result.rearms += 1;
                    arm(&mut rr.ring, flow.stream.as_raw_fd(), idx, cfg.bundle, cfg.skip_copy)?;
                }
            } else if res == 0 {
                if flow.open {
                    flow.open = false;
                    open -= 1;
                }
            } else if res == -libc::ENOBUFS || res == -libc::EINTR || res == -libc::EAGAIN {
                if !cqueue::more(flags) {
                    result.rearms += 1;
                    arm(&mut rr.ring, flow.stream.as_raw_fd(), idx, cfg.bundle, cfg.skip_copy)?;
                }
            } else if flow.open {
                flow.error = Some(format!("receive failed: {}", errno_text(res)));
                flow.open = false;
                open -= 1;
            }
        }
    }
    if open > 0 {
        for flow in state.iter_mut().filter(|f| f.open) {
            flow.error = Some("flow still open when the receiver stopped waiting (sender stalled or vanished)".into());
        }
    }
    result.flows = state.into_iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.bytes, error: f.error }).collect();
    drop(rr);
    Ok(result)
}
