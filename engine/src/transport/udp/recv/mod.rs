//! The UDP receiving queue thread: multishot `RecvMsg` over a provided-buffer ring, UDP GRO,
//! and per-flow sequence accounting.
//!
//! Each flow is one UDP socket (bound, connected to its sender or not) with one multishot
//! `RecvMsgMulti` armed. With `UDP_GRO` on, the kernel hands over many datagrams of one flow
//! in one buffer and says their size in a `SOL_UDP/UDP_GRO` cmsg; we cut the buffer at that
//! size and account each datagram on its own (measured across veth: 1.3-3.1 M datagrams/s
//! with GRO, ~0.5 M/s and drops without). Without GRO each completion is one datagram.
//!
//! Unlike the TCP receiver, this one reads every payload: the header of each datagram
//! ([`crate::wire::udp_payload`]) feeds the flow's [`SeqTracker`]. Arrival times come from the
//! kernel (`SO_TIMESTAMPNS`, one per coalesced buffer) when asked, else from the clock at
//! reaping time.
//!
//! A socket that is not connected accepts datagrams from anyone: the first sender becomes
//! the flow's peer and datagrams from other addresses are counted as strangers, not
//! accounted. The thread ends when every flow has seen a FIN and then `fin_linger` of
//! silence, or at the halt flag or the deadline. With `answer_fin`, each FIN is answered
//! with an iperf2 server report, so an `iperf -c -u` client prints our figures.
//!
//! What the kernel writes into each buffer is read in [`msg`]; one flow's peer, accounting
//! and FIN answer are [`flow`]'s. The loops are tested over loopback, against each other and
//! against iperf2, in `transport/udp/tests.rs`.

mod flow;
mod msg;

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::metrics::seq::{LiveStats, SeqStats, SeqTracker};
use crate::transport::errno_text;
use crate::uring::ring::{build_ring, push, wait_for_completions, BufRing, RingPaths, WaitMode, Waited, WakeBatch};
use crate::wire::udp_payload::{self as payload, DatagramHeader, WireTime};
use flow::UdpReceivingFlow;
use io_uring::types::RecvMsgOut;
use io_uring::{cqueue, opcode, types, IoUring};
use msg::{parse_control, CONTROL_LEN, NAME_LEN, RECVMSG_OUT_LEN};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest payload one receive can carry: a GRO buffer holds up to 64 KiB of datagrams.
pub(crate) const GRO_PAYLOAD: u32 = 65_535;

/// One flow handed to a receiving thread: a bound UDP socket, one sender.
pub struct UdpRecvFlow {
    pub socket: UdpSocket,
    pub queue: u32,
    /// Where to publish the flow's accounting after each completion (per-interval figures).
    pub live: Option<LiveStats>,
}

/// How a UDP receiving thread runs.
#[derive(Debug, Clone)]
pub struct UdpRecvConfig {
    pub wait: WaitMode,
    /// The fast paths the thread's ring is built with.
    pub ring: RingPaths,
    /// Completions to gather per wake-up when sleeping.
    pub batch: WakeBatch,
    /// Enable `UDP_GRO` on every socket (falls back to one datagram per completion if the
    /// kernel refuses, and says so).
    pub gro: bool,
    /// Buffers in the provided-buffer ring (power of two).
    pub buf_count: u16,
    /// Payload room per buffer: [`GRO_PAYLOAD`] with GRO (smaller buffers would truncate
    /// coalesced data), else the largest datagram expected.
    pub max_payload: u32,
    /// Use kernel receive timestamps (`SO_TIMESTAMPNS`) for jitter and delay.
    pub kernel_timestamps: bool,
    /// Keep one-way delay statistics (meaningful only with synchronised clocks).
    pub one_way_delay: bool,
    /// Answer each FIN with an iperf2 server report (at most
    /// [`crate::wire::iperf2::SERVER_ACKFIN_TRIES`] + 1 per flow).
    pub answer_fin: bool,
    /// After every flow has seen a FIN, keep receiving until this much silence (late
    /// datagrams, repeated FINs to answer).
    pub fin_linger: Duration,
    /// Raised by the session when the test must end regardless of the flows.
    pub halt: Arc<AtomicBool>,
    /// Never run past this instant.
    pub deadline: Instant,
}

impl UdpRecvConfig {
    /// Payload room per buffer for `gro` and datagrams of at most `len` bytes.
    pub(crate) fn payload_room(gro: bool, len: u32) -> u32 {
        if gro {
            GRO_PAYLOAD
        } else {
            len.clamp(payload::HEADER_LEN as u32, GRO_PAYLOAD)
        }
    }
}

/// What one flow received.
#[derive(Debug, Clone, Default)]
pub struct UdpFlowReceived {
    pub queue: u32,
    /// Sequence accounting (received, lost, out-of-order, duplicates, jitter, FIN).
    pub stats: SeqStats,
    /// The sender's address (from the first datagram).
    pub peer: Option<SocketAddr>,
    /// First data datagram to FIN (or to the last datagram without a FIN).
    pub duration: Duration,
    /// Datagrams from an address other than the peer's (unconnected sockets only).
    pub strangers: u64,
    /// Datagrams too short or with id 0: not ours.
    pub foreign: u64,
    /// iperf2 server reports sent in answer to FINs.
    pub reports_sent: u32,
    pub error: Option<String>,
}

/// Result of one UDP receiving thread.
#[derive(Debug, Clone, Default)]
pub struct UdpRecvResult {
    pub flows: Vec<UdpFlowReceived>,
    /// Receive completions carrying data.
    pub completions: u64,
    /// Of those, completions found by polling the ring rather than after sleeping in the
    /// kernel until a wake-up (the busy-poll share, as the TCP receive threads count it).
    pub polled_completions: u64,
    /// Of those, completions that carried more than one datagram (GRO coalesced).
    pub coalesced: u64,
    /// Datagrams taken out of completions (data, FIN and foreign).
    pub datagrams: u64,
    /// Completions whose data did not fit the buffer (`MSG_TRUNC`): raise `max_payload`.
    pub truncated: u64,
    /// Times a multishot receive had to be re-armed (ring ran dry).
    pub rearms: u64,
    /// Whether GRO was on for every flow.
    pub gro: bool,
    /// One human line when something was not as asked (GRO refused, ...).
    pub note: Option<String>,
}

// Field order is drop order: the ring goes before the buffers and the msghdr it may use.
struct RecvRing {
    ring: IoUring,
    bufs: BufRing,
    msg: Box<libc::msghdr>,
}

const BUF_GROUP: u16 = 0;

fn arm(rr: &mut RecvRing, fd: i32, idx: usize) -> Result<()> {
    let entry = opcode::RecvMsgMulti::new(types::Fd(fd), &*rr.msg, BUF_GROUP).build();
    // SAFETY: rr.msg and rr.bufs drop after rr.ring (RecvRing's field order); fd stays open
    // until the flow's completions end.
    unsafe { push(&mut rr.ring, &entry.user_data(idx as u64)) }
}

pub(super) fn set_int_opt(
    socket: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    crate::sys::sockopt::set_int(socket.as_raw_fd(), level, name, value)
}

/// Turns on `UDP_GRO` (and `SO_TIMESTAMPNS` when `kernel_timestamps`) on a receiving
/// socket. [`run`] does it too, but a caller that prepares its sockets before telling the
/// sender to start avoids the first datagrams arriving before GRO is on (they would then be
/// split one per completion).
pub(crate) fn prepare_socket(socket: &UdpSocket, gro: bool, kernel_timestamps: bool) -> std::io::Result<()> {
    if gro {
        set_int_opt(socket, libc::SOL_UDP, libc::UDP_GRO, 1)?;
    }
    if kernel_timestamps {
        set_int_opt(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    }
    Ok(())
}

/// One UDP receiving thread: its ring and buffers, its flows and what it counted.
struct Receiver<'a> {
    cfg: &'a UdpRecvConfig,
    rr: RecvRing,
    flows: Vec<UdpReceivingFlow>,
    result: UdpRecvResult,
    notes: Vec<String>,
    /// Flows that have not failed.
    open_flows: usize,
    last_activity: Instant,
    /// When the last datagram from a flow's peer was reaped (the FIN linger counts from it).
    last_datagram: Instant,
    /// Completions of one reap, reused so the loop does not allocate.
    cqes: Vec<(u64, i32, u32)>,
    /// The header the datagrams start with.
    header: DatagramHeader,
}

impl<'a> Receiver<'a> {
    /// Set-up: the ring, the buffer ring and the msghdr template; GRO and timestamps on every
    /// socket (a refusal is a note, not an error); one multishot receive armed per flow.
    fn new(flows: Vec<UdpRecvFlow>, cfg: &'a UdpRecvConfig, header: DatagramHeader) -> Result<Self> {
        let entries = (flows.len() as u32 * 2).next_power_of_two().clamp(64, 4096);
        let ring = build_ring(entries, cfg.ring)?;
        let payload_room = cfg.max_payload.clamp(payload::HEADER_LEN as u32, GRO_PAYLOAD) as usize;
        let buf_size = (RECVMSG_OUT_LEN + NAME_LEN + CONTROL_LEN + payload_room).next_multiple_of(64) as u32;
        let bufs = BufRing::register(&ring, BUF_GROUP, cfg.buf_count, buf_size)?;
        // SAFETY: msghdr is a plain C struct for which all-zero is valid; multishot RecvMsg reads
        // only its name and control lengths.
        let mut msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msg.msg_namelen = NAME_LEN as libc::socklen_t;
        msg.msg_controllen = CONTROL_LEN;
        let mut rr = RecvRing { ring, bufs, msg };

        let mut result = UdpRecvResult { gro: cfg.gro, ..Default::default() };
        let mut notes: Vec<String> = Vec::new();
        let mut state: Vec<UdpReceivingFlow> = Vec::with_capacity(flows.len());
        for f in flows {
            if cfg.gro {
                if let Err(e) = set_int_opt(&f.socket, libc::SOL_UDP, libc::UDP_GRO, 1) {
                    if result.gro {
                        notes.push(format!("UDP GRO refused ({e}): one datagram per receive"));
                    }
                    result.gro = false;
                }
            }
            if cfg.kernel_timestamps {
                if let Err(e) = set_int_opt(&f.socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1) {
                    notes.push(format!("kernel receive timestamps unavailable ({e}): jitter uses reaping time"));
                }
            }
            let tracker = if cfg.one_way_delay { SeqTracker::with_one_way_delay() } else { SeqTracker::new() };
            state.push(UdpReceivingFlow {
                socket: f.socket,
                queue: f.queue,
                live: f.live,
                tracker,
                peer_name: None,
                first_data: None,
                last_data: None,
                fin_at: None,
                strangers: 0,
                foreign: 0,
                reports_sent: 0,
                error: None,
            });
        }
        if result.gro && payload_room < GRO_PAYLOAD as usize {
            notes.push(format!("GRO on with {payload_room}-byte buffers: coalesced data may be truncated"));
        }
        for (idx, flow) in state.iter().enumerate() {
            arm(&mut rr, flow.socket.as_raw_fd(), idx)?;
        }
        Ok(Self {
            cfg,
            rr,
            open_flows: state.len(),
            flows: state,
            result,
            notes,
            last_activity: Instant::now(),
            last_datagram: Instant::now(),
            cqes: Vec::with_capacity(entries as usize * 4),
            header,
        })
    }

    /// How long the next wait may last at most, or `None` when the flows are over: every flow
    /// failed, or every one saw its FIN and then `fin_linger` of silence.
    fn wait_limit(&self, now: Instant) -> Option<Duration> {
        let cfg = self.cfg;
        let all_fin = self.flows.iter().all(UdpReceivingFlow::finished);
        let silence = now.saturating_duration_since(self.last_datagram);
        if (all_fin && silence >= cfg.fin_linger) || self.open_flows == 0 {
            return None;
        }
        let limit = (cfg.deadline - now).min(Duration::from_millis(100));
        Some(if all_fin { limit.min(cfg.fin_linger.saturating_sub(silence)) } else { limit })
    }

    /// Reap: takes every completion off the ring and handles it.
    fn reap(&mut self, counters: &QueueCounters) -> Result<()> {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(self.rr.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        if cqes.is_empty() {
            self.cqes = cqes;
            return Ok(());
        }
        let reaped = Instant::now();
        self.last_activity = reaped;
        let reaped_wall = WireTime::now();
        let done =
            cqes.iter().try_for_each(|&(ud, res, flags)| self.complete(ud, res, flags, reaped, reaped_wall, counters));
        self.cqes = cqes;
        done
    }

    /// One completion: an error ends the flow unless it is transient; a buffer is accounted
    /// and recycled; a multishot receive that ended is re-armed.
    #[inline]
    fn complete(
        &mut self,
        ud: u64,
        res: i32,
        flags: u32,
        reaped: Instant,
        reaped_wall: WireTime,
        counters: &QueueCounters,
    ) -> Result<()> {
        let idx = ud as usize;
        if idx >= self.flows.len() {
            return Ok(());
        }
        let more = cqueue::more(flags);
        if res < 0 {
            let errno = -res;
            let flow = &mut self.flows[idx];
            if matches!(errno, libc::ENOBUFS | libc::EINTR | libc::EAGAIN | libc::ECONNREFUSED) {
                if !more {
                    return self.rearm(idx);
                }
            } else if flow.error.is_none() {
                flow.error = Some(format!("UDP receive failed: {}", errno_text(res)));
                self.open_flows -= 1;
            }
            return Ok(());
        }
        let Some(bid) = cqueue::buffer_select(flags) else {
            return if more { Ok(()) } else { self.rearm(idx) };
        };
        self.account(idx, bid, res as usize, reaped, reaped_wall, counters);
        self.rr.bufs.recycle(bid, 1);
        if !more && self.flows[idx].error.is_none() {
            return self.rearm(idx);
        }
        Ok(())
    }

    /// Account: parses the buffer the kernel filled (source address, control messages,
    /// payload), cuts it into datagrams at the GRO size and credits them to flow `idx` when
    /// they come from its peer; publishes the flow's figures for the sampler.
    #[inline]
    fn account(
        &mut self,
        idx: usize,
        bid: u16,
        len: usize,
        reaped: Instant,
        reaped_wall: WireTime,
        counters: &QueueCounters,
    ) {
        let data = self.rr.bufs.buffer(bid, len);
        let Ok(out) = RecvMsgOut::parse(data, &self.rr.msg) else { return };
        let result = &mut self.result;
        result.completions += 1;
        if out.is_payload_truncated() {
            result.truncated += 1;
        }
        let control = parse_control(out.control_data());
        let arrived = control.stamp.unwrap_or(reaped_wall);
        let name = out.name_data();
        let flow = &mut self.flows[idx];
        let known = flow.is_peer(name);
        let payload = out.payload_data();
        let seg = control.gro_size.unwrap_or(payload.len()).max(1);
        let pieces = payload.len().div_ceil(seg);
        if pieces > 1 {
            result.coalesced += 1;
        }
        result.datagrams += pieces as u64;
        if !known {
            flow.strangers += pieces as u64;
            return;
        }
        self.last_datagram = reaped;
        let data_bytes = flow.account(payload, seg, name, arrived, reaped, (self.cfg.answer_fin, self.header));
        if data_bytes > 0 {
            counters.add(flow.queue as usize, data_bytes);
            if let Some(live) = &flow.live {
                *live.lock().unwrap_or_else(|p| p.into_inner()) = flow.tracker.stats();
            }
        }
    }

    /// Arms flow `idx`'s multishot receive again (the kernel ended it: the buffer ring ran dry,
    /// or a transient error).
    fn rearm(&mut self, idx: usize) -> Result<()> {
        self.result.rearms += 1;
        arm(&mut self.rr, self.flows[idx].socket.as_raw_fd(), idx)
    }

    /// Tear down: the result with every flow's figures; the ring (and with it every armed
    /// multishot receive) goes before the buffers and the sockets.
    fn finish(self) -> UdpRecvResult {
        let Receiver { rr, flows, mut result, notes, .. } = self;
        if !notes.is_empty() {
            result.note = Some(notes.join("; "));
        }
        result.flows = flows.iter().map(UdpReceivingFlow::outcome).collect();
        drop(rr);
        drop(flows);
        result
    }
}

/// Runs until every flow has seen a FIN (then `fin_linger` of silence), `cfg.halt` is raised,
/// or `cfg.deadline` passes.
pub fn run(flows: Vec<UdpRecvFlow>, counters: &QueueCounters, cfg: &UdpRecvConfig) -> Result<UdpRecvResult> {
    run_with(flows, counters, cfg, DatagramHeader::Native)
}

/// [`run`] for datagrams that start with `header` (another tool's format).
pub fn run_with(
    flows: Vec<UdpRecvFlow>,
    counters: &QueueCounters,
    cfg: &UdpRecvConfig,
    header: DatagramHeader,
) -> Result<UdpRecvResult> {
    let mut r = Receiver::new(flows, cfg, header)?;
    while !cfg.halt.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= cfg.deadline {
            break;
        }
        let Some(limit) = r.wait_limit(now) else { break };
        let waited = wait_for_completions(
            &mut r.rr.ring,
            cfg.wait,
            r.last_activity,
            limit.max(Duration::from_micros(50)),
            cfg.batch,
        )?;
        let before = r.result.completions;
        r.reap(counters)?;
        if waited == Waited::Polled {
            // The data completions this reap found, counted once per reap as TCP's loop does.
            r.result.polled_completions += r.result.completions - before;
        }
    }
    Ok(r.finish())
}
