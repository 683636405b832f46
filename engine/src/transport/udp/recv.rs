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
//! silence, or at the stop flag or the deadline. With `answer_fin`, each FIN is answered
//! with an iperf2 server report, so an `iperf -c -u` client prints our figures.

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::metrics::seq::{LiveStats, SeqStats, SeqTracker};
use crate::transport::errno_text;
use crate::uring::ring::{build_ring, push, wait_for_completions, BufRing, RingPaths, WaitMode, Waited, WakeBatch};
use crate::wire::iperf2::{ServerReport, TransitReport, SERVER_ACKFIN_TRIES};
use crate::wire::udp_payload::{self as payload, DatagramHeader, WireTime};
use io_uring::types::RecvMsgOut;
use io_uring::{cqueue, opcode, types, IoUring};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest payload one receive can carry: a GRO buffer holds up to 64 KiB of datagrams.
pub(crate) const GRO_PAYLOAD: u32 = 65_535;
/// Bytes of the `io_uring_recvmsg_out` header the kernel writes first in each buffer.
const RECVMSG_OUT_LEN: usize = 16;
/// Room for the source address (`sockaddr_in6`, which also holds a `sockaddr_in`).
const NAME_LEN: usize = std::mem::size_of::<libc::sockaddr_in6>();
/// Room for control messages: a `UDP_GRO` int (24 bytes) and a `timespec` (32 bytes).
const CONTROL_LEN: usize = 64;

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
    /// [`SERVER_ACKFIN_TRIES`] + 1 per flow).
    pub answer_fin: bool,
    /// After every flow has seen a FIN, keep receiving until this much silence (late
    /// datagrams, repeated FINs to answer).
    pub fin_linger: Duration,
    /// Raised by the session when the test must end regardless of the flows.
    pub stop: Arc<AtomicBool>,
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

/// A flow being received on: its socket, its sequence tracker and its end (FIN, report).
struct UdpReceivingFlow {
    socket: UdpSocket,
    queue: u32,
    live: Option<LiveStats>,
    tracker: SeqTracker,
    /// Raw source address of the peer, for comparisons without parsing.
    peer_name: Option<([u8; NAME_LEN], usize)>,
    first_data: Option<Instant>,
    last_data: Option<Instant>,
    fin_at: Option<Instant>,
    strangers: u64,
    foreign: u64,
    reports_sent: u32,
    error: Option<String>,
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

fn set_int_opt(socket: &UdpSocket, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
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

/// What the control messages of one completion said.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Control {
    gro_size: Option<usize>,
    stamp: Option<WireTime>,
}

fn ne_usize(b: &[u8]) -> usize {
    let mut w = [0u8; std::mem::size_of::<usize>()];
    let n = w.len();
    w.copy_from_slice(&b[..n]);
    usize::from_ne_bytes(w)
}

fn ne_i32(b: &[u8]) -> i32 {
    i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

fn ne_i64(b: &[u8]) -> i64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    i64::from_ne_bytes(w)
}

/// Walks the control messages (`cmsghdr`: length, level, type, data padded to 8 bytes),
/// reading by bytes so the buffer's alignment does not matter.
fn parse_control(mut data: &[u8]) -> Control {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    let mut out = Control::default();
    while data.len() >= HDR {
        let len = ne_usize(data);
        if len < HDR || len > data.len() {
            break;
        }
        let level = ne_i32(&data[std::mem::size_of::<usize>()..]);
        let kind = ne_i32(&data[std::mem::size_of::<usize>() + 4..]);
        let body = &data[HDR..len];
        if level == libc::SOL_UDP && kind == libc::UDP_GRO && body.len() >= 4 {
            out.gro_size = usize::try_from(ne_i32(body)).ok().filter(|&n| n > 0);
        } else if level == libc::SOL_SOCKET && kind == libc::SO_TIMESTAMPNS && body.len() >= 16 {
            out.stamp = Some(WireTime::from_nanos_parts(ne_i64(body), ne_i64(&body[8..])));
        }
        let next = len.next_multiple_of(std::mem::size_of::<usize>());
        if next >= data.len() {
            break;
        }
        data = &data[next..];
    }
    out
}

/// A socket address from raw `sockaddr` bytes.
fn parse_name(name: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*name.first()?, *name.get(1)?]);
    let port = u16::from_be_bytes([*name.get(2)?, *name.get(3)?]);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = name.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = name.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(name.get(24..28)?.try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope)))
        }
        _ => None,
    }
}

/// The iperf2 report of a flow so far.
fn server_report(flow: &UdpReceivingFlow) -> ServerReport {
    let stats = flow.tracker.stats();
    let stop = match (flow.first_data, flow.fin_at.or(flow.last_data)) {
        (Some(a), Some(b)) => b.saturating_duration_since(a),
        _ => Duration::ZERO,
    };
    let transit = stats.delay.map(|d| TransitReport {
        min_s: d.min_us / 1e6,
        max_s: d.max_us / 1e6,
        sum_s: d.sum_us / 1e6,
        mean_s: d.mean_us() / 1e6,
        m2_s2: 0.0,
        vd_s: 0.0,
        count: d.count as u32,
        cnt_ipg: if stop.as_secs_f64() > 0.0 { (stats.received as f64 / stop.as_secs_f64()) as u32 } else { 0 },
        ipg_sum: 1,
    });
    ServerReport {
        bytes: stats.bytes,
        stop,
        lost: stats.lost,
        out_of_order: stats.out_of_order,
        datagrams: stats.expected,
        jitter_s: stats.jitter_us / 1e6,
        transit,
    }
}

/// Sends the flow's report to `name` (the FIN's source address). Best effort: a report
/// that does not go out is retried at the next FIN.
fn answer(flow: &mut UdpReceivingFlow, name: &[u8]) {
    let report = server_report(flow).encode();
    // SAFETY: a valid socket fd; report and name are live buffers of the lengths passed (name
    // is the kernel-filled sockaddr of the FIN's sender).
    let rc = unsafe {
        libc::sendto(
            flow.socket.as_raw_fd(),
            report.as_ptr().cast(),
            report.len(),
            libc::MSG_DONTWAIT,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc > 0 {
        flow.reports_sent += 1;
    }
}

impl UdpReceivingFlow {
    /// Whether the flow expects nothing more: it saw its FIN or failed.
    #[inline]
    fn finished(&self) -> bool {
        self.fin_at.is_some() || self.error.is_some()
    }

    /// Whether `name` is the flow's peer; the first sender becomes it.
    #[inline]
    fn is_peer(&mut self, name: &[u8]) -> bool {
        match &self.peer_name {
            Some((raw, n)) => &raw[..*n] == name,
            None => {
                let mut raw = [0u8; NAME_LEN];
                let n = name.len().min(NAME_LEN);
                raw[..n].copy_from_slice(&name[..n]);
                self.peer_name = Some((raw, n));
                true
            }
        }
    }

    /// Accounts the datagrams of one buffer from the peer (`seg` bytes each, the last one
    /// shorter): data to the tracker, a FIN ends the flow and may be answered with a report to
    /// `name`. Returns the data bytes.
    #[inline]
    fn account(
        &mut self,
        payload: &[u8],
        seg: usize,
        name: &[u8],
        arrived: WireTime,
        reaped: Instant,
        (answer_fin, header): (bool, DatagramHeader),
    ) -> u64 {
        let mut data_bytes = 0u64;
        for datagram in payload.chunks(seg) {
            match header.decode(datagram) {
                None => self.foreign += 1,
                Some(d) if d.fin => {
                    self.tracker.record_fin(d.seq);
                    if self.fin_at.is_none() {
                        self.fin_at = Some(reaped);
                    }
                    // iperf2 answers each FIN, up to its tries; a flow that never carried
                    // data (a forged FIN, whose source may be a victim's) gets one report.
                    let tries = if self.first_data.is_some() { SERVER_ACKFIN_TRIES + 1 } else { 1 };
                    if answer_fin && self.reports_sent < tries {
                        answer(self, name);
                    }
                }
                Some(d) => {
                    self.tracker.record(d.seq, datagram.len() as u32, d.sent, arrived);
                    data_bytes += datagram.len() as u64;
                    self.first_data.get_or_insert(reaped);
                    self.last_data = Some(reaped);
                }
            }
        }
        data_bytes
    }

    /// What the flow received, for the result.
    fn outcome(&self) -> UdpFlowReceived {
        UdpFlowReceived {
            queue: self.queue,
            stats: self.tracker.stats(),
            peer: self.peer_name.as_ref().and_then(|(raw, n)| parse_name(&raw[..*n])),
            duration: match (self.first_data, self.fin_at.or(self.last_data)) {
                (Some(a), Some(b)) => b.saturating_duration_since(a),
                _ => Duration::ZERO,
            },
            strangers: self.strangers,
            foreign: self.foreign,
            reports_sent: self.reports_sent,
            error: self.error.clone(),
        }
    }
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

/// Runs until every flow has seen a FIN (then `fin_linger` of silence), `cfg.stop` is raised,
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
    while !cfg.stop.load(Ordering::Relaxed) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::udp::send::{self as udp_send, FinConfig, SendPath, UdpSendConfig, UdpSendFlow};

    fn cmsg(level: i32, kind: i32, body: &[u8]) -> Vec<u8> {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let len = hdr + body.len();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(body);
        v.resize(len.next_multiple_of(8), 0);
        v
    }

    #[test]
    fn control_messages_parse() {
        let mut data = cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &{
            let mut ts = 1_700_000_000i64.to_ne_bytes().to_vec();
            ts.extend_from_slice(&5_000i64.to_ne_bytes());
            ts
        });
        data.extend(cmsg(libc::SOL_UDP, libc::UDP_GRO, &1470i32.to_ne_bytes()));
        let c = parse_control(&data);
        assert_eq!(c.gro_size, Some(1470), "UDP_GRO segment size");
        assert_eq!(c.stamp, Some(WireTime { sec: 1_700_000_000, usec: 5 }), "SCM_TIMESTAMPNS in microseconds");
        assert_eq!(parse_control(&data[..10]), Control::default(), "truncated control data: nothing, no panic");
        let mut bogus = data.clone();
        bogus[..8].copy_from_slice(&4096usize.to_ne_bytes());
        assert_eq!(parse_control(&bogus), Control::default(), "length past the end stops the walk");
    }

    #[test]
    fn socket_names_parse() {
        let a: SocketAddr = "10.77.0.1:5001".parse().unwrap();
        let mut raw = [0u8; NAME_LEN];
        raw[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        raw[2..4].copy_from_slice(&5001u16.to_be_bytes());
        raw[4..8].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(parse_name(&raw[..16]), Some(a));
        assert_eq!(parse_name(&raw[..3]), None, "short name");
    }

    /// Makes a receiving socket with a receive buffer big enough for the whole test; returns
    /// whether the forced size was granted (root), which lets the test demand zero loss.
    fn receiver_socket() -> (UdpSocket, bool) {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
        let forced = set_int_opt(&socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 256 << 20).is_ok();
        if !forced {
            let _ = set_int_opt(&socket, libc::SOL_SOCKET, libc::SO_RCVBUF, 256 << 20);
        }
        (socket, forced)
    }

    struct Outcome {
        sent: udp_send::UdpSendResult,
        recv: UdpRecvResult,
        secs: f64,
    }

    fn loopback(count: u64, len: u32, gso: bool, gro: bool, answer_fin: bool) -> (Outcome, bool) {
        let (rx, forced) = receiver_socket();
        prepare_socket(&rx, gro, true).expect("GRO and timestamps on loopback");
        let target = rx.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let rcfg = UdpRecvConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            gro,
            buf_count: if gro { 64 } else { 1024 },
            max_payload: UdpRecvConfig::payload_room(gro, len),
            kernel_timestamps: true,
            one_way_delay: true,
            answer_fin,
            fin_linger: Duration::from_millis(20),
            stop: stop.clone(),
            deadline: Instant::now() + Duration::from_secs(20),
        };
        let receiver = std::thread::spawn(move || {
            let counters = QueueCounters::new(1);
            run(vec![UdpRecvFlow { socket: rx, queue: 0, live: None }], &counters, &rcfg)
                .map(|r| (r, counters.snapshot()[0]))
        });
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
        tx.connect(target).expect("connect");
        let scfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len,
            gso,
            inflight: if gso { 8 } else { 32 },
            deadline: Instant::now() + Duration::from_secs(15),
            halt: None,
            rate_bps: 0,
            max_datagrams: count,
            drain_limit: Duration::from_secs(1),
            fin: Some(if answer_fin { FinConfig::iperf2() } else { FinConfig::default() }),
            refused: None,
        };
        let t0 = Instant::now();
        let sent = udp_send::run(vec![UdpSendFlow { socket: tx, queue: 0 }], &QueueCounters::new(1), &scfg)
            .expect("sender runs");
        let secs = t0.elapsed().as_secs_f64();
        let (recv, counted) = receiver.join().expect("receiver thread").expect("receiver runs");
        stop.store(true, Ordering::Relaxed);
        assert_eq!(counted, recv.flows[0].stats.bytes, "queue counter = bytes of accounted datagrams");
        (Outcome { sent, recv, secs }, forced)
    }

    fn check(name: &str, o: &Outcome, forced: bool, count: u64, len: u32) {
        let s = &o.sent.flows[0];
        let r = &o.recv.flows[0];
        eprintln!(
            "{name}: sent {} datagrams in {:.3} s ({:.0}/s) over {} sends [{}]; received {} lost {} ooo {} dup {} \
             jitter {:.1} us; completions {} coalesced {}",
            s.datagrams,
            o.secs,
            s.datagrams as f64 / o.secs,
            o.sent.sends,
            o.sent.path.describe(),
            r.stats.received,
            r.stats.lost,
            r.stats.out_of_order,
            r.stats.duplicates,
            r.stats.jitter_us,
            o.recv.completions,
            o.recv.coalesced,
        );
        assert!(s.error.is_none() && r.error.is_none(), "{name}: no errors: {:?} {:?}", s.error, r.error);
        assert_eq!(s.datagrams, count, "{name}: every datagram accepted by the kernel");
        assert_eq!(s.next_seq, count + 1, "{name}: FIN carries last + 1");
        assert!(r.stats.fin, "{name}: FIN seen");
        assert_eq!(r.stats.expected, count, "{name}: receiver knows how many were sent (from the FIN)");
        assert_eq!(r.stats.received + r.stats.lost, s.datagrams, "{name}: received + lost == sent");
        assert_eq!(r.stats.duplicates, 0, "{name}: no duplicates on loopback");
        assert_eq!(r.foreign + r.strangers, 0, "{name}: nothing undecodable");
        if forced {
            assert_eq!(r.stats.lost, 0, "{name}: no loss on loopback with a {} MiB receive buffer", 256);
            assert_eq!(r.stats.bytes, count * u64::from(len), "{name}: every byte");
        }
        assert_eq!(o.recv.truncated, 0, "{name}: buffers large enough");
    }

    const COUNT: u64 = 20_000;
    const LEN: u32 = 1470;

    #[test]
    fn udp_loopback_gso_sender_plain_receiver() {
        let (o, forced) = loopback(COUNT, LEN, true, false, false);
        assert_eq!(o.sent.path, SendPath::Gso { segments: 44 }, "GSO path ran");
        assert!(o.sent.sends < COUNT / 10, "GSO batches datagrams: {} sends", o.sent.sends);
        check("gso->plain", &o, forced, COUNT, LEN);
    }

    #[test]
    fn udp_loopback_per_datagram_both_ends() {
        let (o, forced) = loopback(COUNT, LEN, false, false, false);
        assert_eq!(o.sent.path, SendPath::PerDatagram);
        assert_eq!(o.sent.sends, COUNT, "one send per datagram");
        assert_eq!(o.recv.coalesced, 0, "no GRO: one datagram per completion");
        check("per-datagram", &o, forced, COUNT, LEN);
    }

    #[test]
    fn udp_loopback_gso_sender_gro_receiver() {
        let (o, forced) = loopback(COUNT, LEN, true, true, false);
        assert!(o.recv.gro, "GRO enabled on the socket");
        assert!(o.recv.coalesced > 0, "loopback delivers GSO sends whole: GRO completions carry many datagrams");
        assert!(o.recv.completions < COUNT / 5, "{} completions for {COUNT} datagrams", o.recv.completions);
        check("gso->gro", &o, forced, COUNT, LEN);
        let delay = o.recv.flows[0].stats.delay.expect("one-way delay kept (same host, same clock)");
        assert!(delay.min_us >= 0.0 && delay.max_us < 5e6, "delay on one host is small and non-negative: {delay:?}");
    }

    /// A source that never sent data and sends ten FINs (forged, maybe in a victim's name)
    /// gets one report, not one per FIN as a flow that carried data does.
    #[test]
    fn fins_without_data_get_one_report() {
        let (rx, _) = receiver_socket();
        let target = rx.local_addr().unwrap();
        let rcfg = UdpRecvConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            gro: false,
            buf_count: 64,
            max_payload: UdpRecvConfig::payload_room(false, 1470),
            kernel_timestamps: false,
            one_way_delay: false,
            answer_fin: true,
            fin_linger: Duration::from_millis(300),
            stop: Arc::new(AtomicBool::new(false)),
            deadline: Instant::now() + Duration::from_secs(5),
        };
        let receiver = std::thread::spawn(move || {
            run(vec![UdpRecvFlow { socket: rx, queue: 0, live: None }], &QueueCounters::new(1), &rcfg)
        });
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(target).unwrap();
        tx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let mut fin = [0u8; 64];
        payload::encode_fin(&mut fin, 1000, WireTime::now()).unwrap();
        let mut reports = 0;
        for _ in 0..10 {
            tx.send(&fin).unwrap();
            let mut buf = [0u8; 512];
            while tx.recv(&mut buf).is_ok() {
                reports += 1;
            }
        }
        let done = receiver.join().unwrap().unwrap();
        assert_eq!(done.flows[0].reports_sent, 1, "the receiver's own count");
        assert_eq!(reports, 1, "reports that arrived for ten FINs without data");
    }

    #[test]
    fn udp_loopback_fin_answered_with_iperf2_report() {
        let (o, forced) = loopback(2_000, 1000, true, true, true);
        check("report", &o, forced, 2_000, 1000);
        let report = o.sent.flows[0].report.expect("the sender got a server report back");
        let r = &o.recv.flows[0];
        assert!(r.reports_sent >= 1, "receiver answered the FIN");
        assert_eq!(report.datagrams, 2_000, "report: datagrams = highest sequence number sent");
        assert_eq!(report.lost, r.stats.lost);
        assert_eq!(report.bytes, r.stats.bytes);
        assert!(o.sent.flows[0].fins >= 1 && o.sent.flows[0].fins < 50, "FINs bounded: {}", o.sent.flows[0].fins);
    }

    fn free_udp_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port()).expect("a free port")
    }

    fn iperf_present() -> bool {
        std::process::Command::new("iperf").arg("-v").output().is_ok()
    }

    /// Kills and reaps a child we started (by its own handle, nothing broader).
    fn finish(mut child: std::process::Child) -> String {
        let _ = child.kill();
        let out = child.wait_with_output().expect("child output");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    /// Our sender against an unmodified `iperf -s -u` 2.1.8: it must account our datagrams and
    /// send back a report we decode. Needs the `iperf` binary (scripts/install-deps.sh --test
    /// installs it); it runs with the other unit tests and fails, not skips, without it.
    #[test]
    fn iperf2_server_accounts_our_datagrams() {
        assert!(iperf_present(), "iperf (2.1.8) is not installed: apt-get install iperf (.ci/run does)");
        let port = free_udp_port();
        let server = std::process::Command::new("timeout")
            .args(["10", "iperf", "-s", "-u", "-p", &port.to_string(), "-t", "6", "-l", "2000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start iperf -s -u");
        std::thread::sleep(Duration::from_millis(500));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(("127.0.0.1", port)).unwrap();
        let count = 5_000;
        let cfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len: 1470,
            gso: true,
            inflight: 4,
            deadline: Instant::now() + Duration::from_secs(5),
            halt: None,
            rate_bps: 100_000_000,
            max_datagrams: count,
            drain_limit: Duration::from_secs(1),
            fin: Some(FinConfig::iperf2()),
            refused: None,
        };
        let sent = udp_send::run(vec![UdpSendFlow { socket: tx, queue: 0 }], &QueueCounters::new(1), &cfg).unwrap();
        let text = finish(server);
        let flow = &sent.flows[0];
        eprintln!("iperf -s said:\n{text}\nour sender: {flow:?}");
        let report = flow.report.expect("iperf -s answered our FIN with its report");
        assert_eq!(flow.datagrams, count);
        assert!(
            report.datagrams + 1 >= count && report.datagrams <= count + 1,
            "iperf2 counts our datagrams by sequence number: {report:?}"
        );
        assert!(report.lost + report.out_of_order <= count / 10, "little loss at 100 Mbit/s: {report:?}");
        assert!(report.bytes >= (count - report.lost - 1) * 1470, "bytes of what arrived: {report:?}");
    }

    /// An unmodified `iperf -c -u` 2.1.8 against our receiver: we account its datagrams and
    /// its client prints our report. Needs the `iperf` binary (scripts/install-deps.sh --test
    /// installs it); it runs with the other unit tests and fails, not skips, without it.
    #[test]
    fn iperf2_client_prints_our_report() {
        assert!(iperf_present(), "iperf (2.1.8) is not installed: apt-get install iperf (.ci/run does)");
        let (rx, _) = receiver_socket();
        prepare_socket(&rx, true, true).unwrap();
        let port = rx.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let rcfg = UdpRecvConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            gro: true,
            buf_count: 64,
            max_payload: GRO_PAYLOAD,
            kernel_timestamps: true,
            one_way_delay: false,
            answer_fin: true,
            fin_linger: crate::wire::iperf2::SERVER_ACKFIN_SILENCE,
            stop,
            deadline: Instant::now() + Duration::from_secs(8),
        };
        let receiver = std::thread::spawn(move || {
            run(vec![UdpRecvFlow { socket: rx, queue: 0, live: None }], &QueueCounters::new(1), &rcfg).unwrap()
        });
        let client = std::process::Command::new("timeout")
            .args(["8", "iperf", "-c", "127.0.0.1", "-u", "-p", &port.to_string(), "-t", "1", "-b", "20M"])
            .output()
            .expect("run iperf -c -u");
        let text = String::from_utf8_lossy(&client.stdout).to_string() + &String::from_utf8_lossy(&client.stderr);
        let recv = receiver.join().unwrap();
        let flow = &recv.flows[0];
        eprintln!("iperf -c said:\n{text}\nour receiver: {flow:?} {recv:?}");
        let sent: u64 = text
            .lines()
            .find_map(|l| l.split("Sent ").nth(1)?.split_whitespace().next()?.parse().ok())
            .expect("client prints how many it sent");
        assert!(flow.stats.fin, "the client's FIN arrived");
        // Captured on loopback: the client's "Sent N" is its data datagrams + 2 (ids 1..=N-2,
        // then FIN -(N-1)); an iperf2 server would print N-1 as total (it counts the FIN).
        assert_eq!(flow.stats.expected + 2, sent, "we know how many data datagrams it sent");
        assert_eq!(flow.stats.received + flow.stats.lost, flow.stats.expected, "accounting identity");
        assert!(flow.reports_sent >= 1, "we answered");
        assert!(text.contains("Server Report"), "the client printed our report");
        assert!(!text.contains("did not receive ack"), "the client got the report in time");
        let expected_total = format!("{}/{}", flow.stats.lost, flow.stats.expected);
        assert!(text.contains(&expected_total), "client shows our lost/total {expected_total}");
    }
}
