//! TCP rr on a spinning thread with one flow: one `io_uring_enter` per transaction on each end.
//!
//! The general loop (`rr.rs`) arms a receive, which the kernel parks on the socket's wait
//! queue; the answer's arrival queues task work and flags `IORING_SQ_TASKRUN`; one entry runs
//! that work (the receive) and a second submits the next send and receive: two entries and a
//! poll armed and torn down per transaction on each end.
//!
//! Here a multishot poll stays armed on the socket for the whole test (the doorbell). When data
//! arrives its wake-up flags `IORING_SQ_TASKRUN` in shared memory, which the thread sees while
//! it spins in user space. It then submits, in one entry, a receive of the whole message
//! (`MSG_WAITALL`: the data is already there, so it completes inline) linked to the next send
//! (the server's answer, or the client's next request): the kernel runs the send as deferred
//! task work inside the same entry, because the entry asks for completions. Nothing is armed
//! or torn down per transaction, and a short or failed receive cancels the linked send, so an
//! answer never leaves before its whole request arrived.
//!
//! The client reads the clock once per entry, just before it: a transaction ends at the entry
//! whose receive completed its response, and the next one starts at that same entry (its
//! request is the linked send). Each round trip so timed spans exactly one send, one receive
//! and the peer's turn, as a send-then-receive loop's does.
//!
//! When the thread may sleep (adaptive busy-poll, the default with a CPU of its own), it spins
//! for the window after the last activity as before, then waits in the kernel for the
//! doorbell's completion; the receive and send then follow in one entry as above.
//!
//! Used when the ring has deferred task work with the task-run flag (Linux 6.1+), the thread
//! spins (busy-poll on or adaptive), serves exactly one flow, and no `--trip-times` stamps or
//! SQPOLL are asked for (a server also no `--bounceback` bursts); anything else runs the
//! general loop.

use crate::base::error::{Error, Result};
use crate::metrics::measure::QueueCounters;
use crate::transport::rr::{latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::tcp::RrFlow;
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, push, AlignedBuf, WaitMode};
use crate::uring::user_data::{UserData, RR_BELL};
use io_uring::types::{SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Largest message (a whole `--bounceback` burst) this loop receives in one operation.
const MAX_MESSAGE: u32 = 1 << 20;
/// Spins between two looks at the halt flag and the clock (a few microseconds).
const SPINS_PER_CHECK: u32 = 256;
/// `IORING_ENTER_GETEVENTS` (the crate keeps its constants private): the entry runs deferred
/// task work.
const ENTER_GETEVENTS: u32 = 1;
/// A thread that never sleeps queues a receive after this long without a doorbell (a guard:
/// the doorbell is normally not missed).
const SPIN_PATIENCE: Duration = Duration::from_millis(1);
/// Longest sleep in the kernel before the halt flag is looked at again.
const SLEEP_LIMIT: Duration = Duration::from_millis(100);

const BELL: u64 = 0;
const RECV: u64 = 1;
const SEND: u64 = 2;

fn user_data(op: u64) -> u64 {
    RR_BELL.pack(UserData { op, ..UserData::default() })
}

/// The ring and the buffers its operations point at. Field order is drop order: the ring goes
/// first.
pub(crate) struct BellRing {
    ring: IoUring,
    send_buf: AlignedBuf,
    recv_buf: AlignedBuf,
    /// How long to spin without activity before sleeping; `None`: never sleep.
    spin_window: Option<Duration>,
}

impl BellRing {
    /// A ring for this loop, or `None` when it cannot serve these flows (see the module notes).
    /// A server answers one request per receive, so it takes no `--bounceback` bursts: the
    /// requests after a burst's first are already queued and ring no doorbell.
    pub(crate) fn for_flows(flows: &[RrFlow], cfg: &RrConfig, server: bool) -> Result<Option<Self>> {
        let burst = cfg.bounceback.max(1);
        let (req, resp) = (cfg.req_len.saturating_mul(burst), cfg.resp_len.saturating_mul(burst));
        let spin_window = match cfg.wait {
            WaitMode::Spin => None,
            WaitMode::Adaptive { spin_us } => Some(Duration::from_micros(u64::from(spin_us))),
            WaitMode::Sleep => return Ok(None),
        };
        if flows.len() != 1
            || (server && burst > 1)
            || cfg.trip_times
            || cfg.ring.sqpoll.is_some()
            || req.max(resp) > MAX_MESSAGE
        {
            return Ok(None);
        }
        let ring = build_ring(64, cfg.ring)?;
        // build_ring drops SINGLE_ISSUER along with DEFER_TASKRUN and TASKRUN_FLAG.
        if !ring.params().is_setup_single_issuer() {
            return Ok(None);
        }
        let len = req.max(resp).max(1) as usize;
        let send_buf = AlignedBuf::new(len)?;
        // SAFETY: a fresh mapping of at least len bytes.
        unsafe { std::ptr::write_bytes(send_buf.as_ptr(), b'r', send_buf.len()) };
        Ok(Some(Self { ring, send_buf, recv_buf: AlignedBuf::new(len)?, spin_window }))
    }

    /// Registers the flow's socket as fixed file 0 and arms the doorbell on it.
    fn arm(&mut self, fd: i32) -> Result<()> {
        self.ring.submitter().register_files(&[fd]).map_err(|e| Error::io("registering an rr flow's socket", e))?;
        self.bell()
    }

    fn bell(&mut self) -> Result<()> {
        let bell = opcode::PollAdd::new(types::Fixed(0), libc::POLLIN as u32).multi(true).build();
        // SAFETY: a poll points at no memory.
        unsafe { push(&mut self.ring, &bell.user_data(user_data(BELL))) }
    }

    /// Queues a receive of `len` bytes, linked to a send of `then_send` bytes when not zero.
    fn recv_then_send(&mut self, len: u32, then_send: u32) -> Result<()> {
        let recv = opcode::Recv::new(types::Fixed(0), self.recv_buf.as_ptr(), len).flags(libc::MSG_WAITALL).build();
        let recv = if then_send > 0 { recv.flags(squeue::Flags::IO_LINK) } else { recv };
        // SAFETY: recv_buf is written only by the kernel, never read, and drops after the ring.
        unsafe { push(&mut self.ring, &recv.user_data(user_data(RECV))) }?;
        if then_send > 0 {
            self.send(then_send)?;
        }
        Ok(())
    }

    fn send(&mut self, len: u32) -> Result<()> {
        let send = opcode::Send::new(types::Fixed(0), self.send_buf.as_ptr(), len).flags(libc::MSG_WAITALL).build();
        // SAFETY: send_buf is only read by the kernel and drops after the ring.
        unsafe { push(&mut self.ring, &send.user_data(user_data(SEND))) }
    }

    fn flagged(&mut self) -> bool {
        self.ring.submission().taskrun()
    }

    /// Waits until completions are ready or deferred work is flagged, spinning in user space
    /// (no system call, a clock read every few microseconds at most). Past the spin window it
    /// sleeps in the kernel until a completion when `may_sleep` (a receive is queued, so data
    /// will complete something), else returns [`Waited::Idle`].
    fn wait(&mut self, cfg: &RrConfig, may_sleep: bool) -> Result<Waited> {
        let mut spins = 0u32;
        let mut idle_since = None;
        loop {
            if self.flagged() || !self.ring.completion().is_empty() {
                return Ok(Waited::Ready);
            }
            spins = spins.wrapping_add(1);
            if spins % SPINS_PER_CHECK != 0 {
                std::hint::spin_loop();
                continue;
            }
            if cfg.halt.load(Ordering::Relaxed) {
                return Ok(Waited::Stopped);
            }
            let now = Instant::now();
            let window = self.spin_window.unwrap_or(SPIN_PATIENCE);
            if now.duration_since(*idle_since.get_or_insert(now)) < window {
                continue;
            }
            if !may_sleep {
                return Ok(Waited::Idle);
            }
            idle_since = None;
            if self.spin_window.is_none() {
                continue;
            }
            let ts = Timespec::from(SLEEP_LIMIT);
            match self.ring.submitter().submit_with_args(1, &SubmitArgs::new().timespec(&ts)) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(Error::io("waiting on io_uring", e)),
            }
        }
    }

    /// One entry: submits what is queued and runs the deferred work (the doorbell's, the linked
    /// send), without waiting for anything.
    fn enter(&mut self) -> Result<()> {
        let queued = self.ring.submission().len() as u32;
        // SAFETY: no argument pointer; what the queued entries point at is covered where they
        // were pushed.
        match unsafe { self.ring.submitter().enter::<libc::sigset_t>(queued, 0, ENTER_GETEVENTS, None) } {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)) => Ok(()),
            Err(e) => Err(Error::io("entering io_uring", e)),
        }
    }

    /// The completions ready now, as (operation, result, flags).
    fn reap(&mut self, into: &mut Vec<(u64, i32, u32)>) {
        into.clear();
        into.extend(self.ring.completion().map(|c| (RR_BELL.unpack(c.user_data()).op, c.result(), c.flags())));
    }

    /// The doorbell's completion: re-armed when it ended (the kernel may end a multishot poll).
    fn bell_done(&mut self, res: i32, flags: u32) -> Result<()> {
        if cqueue::more(flags) {
            return Ok(());
        }
        if res < 0 && res != -libc::ECANCELED {
            return Err(Error::io("polling an rr flow", std::io::Error::from_raw_os_error(-res)));
        }
        self.bell()
    }
}

/// How a wait ended.
#[derive(PartialEq)]
enum Waited {
    Ready,
    /// The spin window passed with no receive queued.
    Idle,
    Stopped,
}

/// Where one flow's transaction stands.
#[derive(Default)]
struct Turn {
    /// A receive is queued or in flight.
    receiving: bool,
    /// The doorbell rang while no receive was queued: data waits (the task-run flag that
    /// announced it was consumed by a sleep in the kernel, or by the entry that sent).
    rung: bool,
    /// A receive with its linked send was queued and the send has not completed. No new
    /// receive is queued meanwhile: when the receive completed in task work rather than inline,
    /// the kernel leaves the send as further task work for the next entry, and a receive queued
    /// ahead of it would find no data and park on the socket. Doorbells seen until then
    /// announce the data that receive took (its own completion comes first, the doorbell's task
    /// work runs after it in the same entry); one after the send's completion is new data.
    sending: bool,
    done: bool,
    transactions: u64,
    error: Option<String>,
}

impl Turn {
    /// Whether to queue a receive now: none queued, and data announced (or the wait gave up
    /// on the doorbell).
    fn ready(&self, flagged: bool, waited: &Waited) -> bool {
        !self.receiving && !self.sending && (flagged || self.rung || *waited == Waited::Idle)
    }

    /// Marks a receive (with its linked send when `linked`) queued.
    fn queued(&mut self, linked: bool) {
        self.receiving = true;
        self.rung = false;
        self.sending = linked;
    }

    /// A doorbell completion: new data unless a receive or its linked send is still pending.
    fn bell(&mut self) {
        if !self.sending && !self.receiving {
            self.rung = true;
        }
    }

    fn fail(&mut self, what: String) {
        self.error.get_or_insert(what);
        self.done = true;
    }
}

/// The client's loop (see the module notes). Returns like `rr::run_client`.
pub(crate) fn run_client(
    mut rr: BellRing,
    flow: RrFlow,
    counters: &QueueCounters,
    cfg: &RrConfig,
) -> Result<RrClientResult> {
    let burst = cfg.bounceback.max(1);
    let (req_len, resp_len) = (cfg.req_len * burst, cfg.resp_len * burst);
    let mut latency_ns = latency_histogram();
    let mut t = Turn::default();
    rr.arm(flow.stream.as_raw_fd())?;
    rr.send(req_len)?;
    let mut started = Instant::now();
    rr.enter()?;
    // A response is awaited (its request sent or on its way), and the queued receive has the
    // next request linked.
    let mut awaiting = true;
    let mut linked = false;
    let mut entered = started;
    let mut cqes = Vec::with_capacity(8);
    loop {
        rr.reap(&mut cqes);
        for &(op, res, flags) in &cqes {
            match op {
                BELL => {
                    t.bell();
                    rr.bell_done(res, flags)?;
                }
                SEND => {
                    t.sending = false;
                    if res < 0 && res != -libc::ECANCELED {
                        t.fail(format!("transaction failed: {}", errno_text(res)));
                    }
                }
                _ if res == resp_len as i32 => {
                    // A whole transaction (the server answers only a whole request).
                    t.receiving = false;
                    t.transactions += u64::from(burst);
                    counters.add(flow.queue as usize, u64::from(burst));
                    cfg.record(&mut latency_ns, flow.queue as usize, started, entered);
                    started = entered;
                    awaiting = linked;
                    t.done |= !linked;
                }
                _ => t.fail(match res {
                    0 => "server closed the flow mid-transaction".into(),
                    r if r > 0 => "server closed the flow mid-response".into(),
                    r => format!("transaction failed: {}", errno_text(r)),
                }),
            }
        }
        if t.done {
            break;
        }
        // A doorbell already reaped needs no waiting.
        let waited = if t.rung { Waited::Ready } else { rr.wait(cfg, t.receiving || t.sending || !awaiting)? };
        if waited == Waited::Stopped {
            t.fail("server stopped answering".into());
            break;
        }
        let flagged = rr.flagged();
        let queue = awaiting && t.ready(flagged, &waited);
        if queue || flagged {
            entered = Instant::now();
        }
        if queue {
            linked = entered < cfg.deadline;
            rr.recv_then_send(resp_len, if linked { req_len } else { 0 })?;
            t.queued(linked);
        }
        rr.enter()?;
    }
    let _ = flow.stream.shutdown(Shutdown::Write);
    let flows = vec![FlowOutcome { queue: flow.queue, bytes: t.transactions, error: t.error }];
    Ok(RrClientResult { flows, latency_ns, failures: RrFailures::default(), trip: None, mptcp: Vec::new() })
}

/// The server's loop: answers every whole request until the client's half-close.
pub(crate) fn run_server(
    mut rr: BellRing,
    flow: RrFlow,
    counters: &QueueCounters,
    cfg: &RrConfig,
) -> Result<Vec<FlowOutcome>> {
    let mut t = Turn::default();
    rr.arm(flow.stream.as_raw_fd())?;
    rr.enter()?;
    let mut cqes = Vec::with_capacity(8);
    loop {
        rr.reap(&mut cqes);
        for &(op, res, flags) in &cqes {
            if op == SEND {
                t.sending = false;
            }
            match op {
                BELL => {
                    t.bell();
                    rr.bell_done(res, flags)?;
                }
                RECV => {
                    t.receiving = false;
                    match res {
                        r if r == cfg.req_len as i32 => {}
                        // EOF between requests is the client's clean end.
                        0 => t.done = true,
                        r if r > 0 => t.fail("client closed the flow mid-request".into()),
                        r => t.fail(format!("transaction failed: {}", errno_text(r))),
                    }
                }
                _ if res == cfg.resp_len as i32 => {
                    t.transactions += 1;
                    counters.add(flow.queue as usize, 1);
                }
                // Cancelled: its request was short, which the receive reports.
                _ if res == -libc::ECANCELED => {}
                _ => t.fail(format!("transaction failed: {}", errno_text(res))),
            }
        }
        if t.done {
            break;
        }
        // A doorbell already reaped needs no waiting.
        let waited = if t.rung { Waited::Ready } else { rr.wait(cfg, t.receiving || t.sending)? };
        if waited == Waited::Stopped {
            t.fail("flow still open when the server stopped waiting".into());
            break;
        }
        if t.ready(rr.flagged(), &waited) {
            rr.recv_then_send(cfg.req_len, cfg.resp_len)?;
            t.queued(true);
        }
        rr.enter()?;
    }
    Ok(vec![FlowOutcome { queue: flow.queue, bytes: t.transactions, error: t.error }])
}
