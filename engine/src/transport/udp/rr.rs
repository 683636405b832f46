//! Request/response over UDP: the client sends a `req_len`-byte datagram and waits for a
//! `resp_len`-byte answer, one transaction in flight per flow; the server answers every
//! request.
//!
//! Datagrams get lost, so a transaction carries a tag: the first bytes of every request hold
//! the low bytes of the flow's transaction number (up to 8, as many as the sizes allow), and
//! the server echoes them at the start of its answer. A transaction unanswered within the
//! timeout is counted and the flow moves on; an answer that arrives later does not match the
//! current tag and is discarded as late instead of being taken for the next answer.
//! With 1-byte messages the tag is one byte, so an answer late by a multiple of 256
//! transactions would still match: rare, and only possible once a timeout has fired.
//!
//! Each flow has its own buffers (the tag is read back), and its receive stays armed across
//! transactions, so the loop never cancels anything until the flow ends.
//!
//! `--trip-times`: the server writes the CLOCK_REALTIME time a request arrived into bytes
//! 8..16 of its answer (after the tag); the client splits the round trip there
//! (transport/trip.rs).

use crate::base::error::Result;
use crate::base::spec::{TRIP_STAMP_LEN, UDP_TRIP_STAMP_AT};
use crate::metrics::measure::QueueCounters;
use crate::transport::rr::{latency_histogram, RrClientResult, RrConfig, RrFailures};
use crate::transport::trip::{realtime_ns, TripLegs};
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{build_ring, cancel_all, push, wait_for_completions, RingPaths, WakeBatch};
use crate::uring::user_data::{UserData, UDP_RR};
use io_uring::{opcode, types, IoUring};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One flow handed to a UDP rr thread: a socket connected to its peer.
pub(crate) struct UdpRrFlow {
    pub socket: UdpSocket,
    pub queue: u32,
}

const SEND: u64 = 0;
const RECV: u64 = 1;

fn user_data(idx: usize, op: u64) -> u64 {
    UDP_RR.pack(UserData { index: idx, op, ..UserData::default() })
}

/// Bytes of the transaction tag a message of `len` bytes carries.
fn tag_len(len: u32) -> usize {
    (len as usize).min(8)
}

struct Flow {
    socket: UdpSocket,
    queue: u32,
    send: Box<[u8]>,
    recv: Box<[u8]>,
    /// Client: the outstanding transaction's number, and when it started (None between
    /// transactions, and once the flow is done).
    seq: u64,
    outstanding: Option<Instant>,
    /// `--trip-times` client: CLOCK_REALTIME when the outstanding request was sent.
    sent_real_ns: u64,
    recv_armed: bool,
    send_inflight: bool,
    done: bool,
    transactions: u64,
    error: Option<String>,
}

impl Flow {
    fn new(f: UdpRrFlow, send_len: u32, recv_len: u32) -> Self {
        Self {
            socket: f.socket,
            queue: f.queue,
            send: vec![b'u'; send_len as usize].into_boxed_slice(),
            // One spare byte: a longer datagram than expected shows as a longer read.
            recv: vec![0; recv_len as usize + 1].into_boxed_slice(),
            seq: 0,
            outstanding: None,
            sent_real_ns: 0,
            recv_armed: false,
            send_inflight: false,
            done: false,
            transactions: 0,
            error: None,
        }
    }
}

// Field order is drop order: the ring goes before the flows whose buffers it references.
struct UdpRrRing {
    ring: IoUring,
    flows: Vec<Flow>,
}

impl UdpRrRing {
    fn new(flows: Vec<UdpRrFlow>, send_len: u32, recv_len: u32, ring: RingPaths) -> Result<Self> {
        let entries = (flows.len() as u32 * 2).next_power_of_two().clamp(64, 4096);
        let ring = build_ring(entries, ring)?;
        Ok(Self { ring, flows: flows.into_iter().map(|f| Flow::new(f, send_len, recv_len)).collect() })
    }

    fn send(&mut self, idx: usize) -> Result<()> {
        let f = &mut self.flows[idx];
        let entry = opcode::Send::new(types::Fd(f.socket.as_raw_fd()), f.send.as_ptr(), f.send.len() as u32).build();
        f.send_inflight = true;
        // SAFETY: f.send and f.socket live in self.flows, which drops after self.ring.
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, SEND))) }
    }

    fn recv(&mut self, idx: usize) -> Result<()> {
        let f = &mut self.flows[idx];
        let entry =
            opcode::Recv::new(types::Fd(f.socket.as_raw_fd()), f.recv.as_mut_ptr(), f.recv.len() as u32).build();
        f.recv_armed = true;
        // SAFETY: f.recv is written only by the kernel while recv_armed, and lives in
        // self.flows, which drops after self.ring.
        unsafe { push(&mut self.ring, &entry.user_data(user_data(idx, RECV))) }
    }

    fn inflight(&self) -> usize {
        self.flows.iter().map(|f| usize::from(f.recv_armed) + usize::from(f.send_inflight)).sum()
    }

    /// Cancels the receives still armed and waits for them, so the buffers can go.
    fn finish(mut self) -> Vec<FlowOutcome> {
        let inflight = self.inflight();
        let _ = cancel_all(&mut self.ring, inflight, Duration::from_secs(1), |_, _, _| {});
        self.flows.into_iter().map(|f| FlowOutcome { queue: f.queue, bytes: f.transactions, error: f.error }).collect()
    }
}

/// Where an answer's `--trip-times` stamp lies.
const STAMP: std::ops::Range<usize> = UDP_TRIP_STAMP_AT as usize..(UDP_TRIP_STAMP_AT + TRIP_STAMP_LEN) as usize;

/// How often a thread looks at its flows' timeouts at least.
fn tick(cfg: &RrConfig) -> Duration {
    (cfg.timeout / 2).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

/// Counts a failed send or receive against the outstanding transaction.
fn classify(failures: &mut RrFailures, res: i32) {
    if res == -libc::ECONNREFUSED {
        failures.refused += 1;
    } else {
        failures.other += 1;
    }
}

/// Runs a UDP rr client thread until the deadline: one transaction in flight per flow,
/// each retried as a new transaction when unanswered within `cfg.timeout`.
pub(crate) fn run_client(flows: Vec<UdpRrFlow>, counters: &QueueCounters, cfg: &RrConfig) -> Result<RrClientResult> {
    let mut rr = UdpRrRing::new(flows, cfg.req_len, cfg.resp_len, cfg.ring)?;
    let tag = tag_len(cfg.req_len).min(tag_len(cfg.resp_len));
    let mut failures = RrFailures::default();
    let mut latency_ns = latency_histogram();
    let mut trip = cfg.trip_times.then(TripLegs::new);
    let start = |rr: &mut UdpRrRing, idx: usize| -> Result<()> {
        let f = &mut rr.flows[idx];
        let n = tag_len(cfg.req_len);
        f.send[..n].copy_from_slice(&f.seq.to_le_bytes()[..n]);
        f.outstanding = Some(Instant::now());
        if cfg.trip_times {
            f.sent_real_ns = realtime_ns();
        }
        rr.send(idx)
    };
    // After a transaction ended (answered or not): the next one, or the flow's end at the
    // deadline. Returns whether the flow ended.
    let next = |rr: &mut UdpRrRing, idx: usize, now: Instant| -> Result<bool> {
        if now >= cfg.deadline {
            rr.flows[idx].done = true;
            return Ok(true);
        }
        rr.flows[idx].seq += 1;
        start(rr, idx).map(|_| false)
    };
    for idx in 0..rr.flows.len() {
        rr.recv(idx)?;
        start(&mut rr, idx)?;
    }
    let mut active = rr.flows.len();
    let mut last_activity = Instant::now();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(rr.flows.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    while active > 0 && !cfg.halt.load(Ordering::Relaxed) {
        wait_for_completions(&mut rr.ring, cfg.wait, last_activity, tick(cfg), batch)?;
        cqes.clear();
        cqes.extend(rr.ring.completion().map(|c| (c.user_data(), c.result())));
        let now = Instant::now();
        if !cqes.is_empty() {
            last_activity = now;
        }
        for &(ud, res) in &cqes {
            let UserData { index: idx, op, .. } = UDP_RR.unpack(ud);
            let f = &mut rr.flows[idx];
            if op == SEND {
                f.send_inflight = false;
                if res < 0 && f.outstanding.take().is_some() {
                    classify(&mut failures, res);
                    f.error.get_or_insert_with(|| format!("send failed: {}", errno_text(res)));
                }
            } else {
                f.recv_armed = false;
                if res < 0 {
                    if res != -libc::EINTR && res != -libc::EAGAIN && f.outstanding.take().is_some() {
                        classify(&mut failures, res);
                        f.error.get_or_insert_with(|| format!("receive failed: {}", errno_text(res)));
                    }
                } else if f.outstanding.is_some() && f.recv[..tag] == f.seq.to_le_bytes()[..tag] {
                    if res as u32 == cfg.resp_len {
                        let started = f.outstanding.take().expect("checked above");
                        f.transactions += 1;
                        counters.add(f.queue as usize, 1);
                        cfg.record(&mut latency_ns, f.queue as usize, started, now);
                        if let Some(legs) = trip.as_mut().filter(|_| cfg.in_window(now)) {
                            let stamp = u64::from_be_bytes(f.recv[STAMP].try_into().expect("8 bytes"));
                            legs.record(f.sent_real_ns, stamp, realtime_ns());
                        }
                    } else {
                        f.outstanding = None;
                        failures.other += 1;
                        f.error.get_or_insert_with(|| {
                            format!("answer of {res} bytes where {} were expected", cfg.resp_len)
                        });
                    }
                } else {
                    failures.late += 1;
                }
            }
            let f = &mut rr.flows[idx];
            if f.done {
                continue;
            }
            if !f.recv_armed {
                rr.recv(idx)?;
            }
            let f = &rr.flows[idx];
            if f.outstanding.is_none() && !f.send_inflight && next(&mut rr, idx, now)? {
                active -= 1;
            }
        }
        // Unanswered transactions: count them and move on.
        for idx in 0..rr.flows.len() {
            let f = &mut rr.flows[idx];
            if f.done || f.outstanding.is_none_or(|t| now.duration_since(t) < cfg.timeout) {
                continue;
            }
            failures.timeouts += 1;
            f.outstanding = None;
            // With its send still in flight, the next one starts once the send completes.
            if !f.send_inflight && next(&mut rr, idx, now)? {
                active -= 1;
            }
        }
    }
    Ok(RrClientResult { flows: rr.finish(), latency_ns, failures, trip, mptcp: Vec::new() })
}

/// Runs a UDP rr server thread: answers every request, echoing its tag, until `cfg.halt`.
pub(crate) fn run_server(flows: Vec<UdpRrFlow>, counters: &QueueCounters, cfg: &RrConfig) -> Result<Vec<FlowOutcome>> {
    let mut rr = UdpRrRing::new(flows, cfg.resp_len, cfg.req_len, cfg.ring)?;
    let tag = tag_len(cfg.req_len).min(tag_len(cfg.resp_len));
    for idx in 0..rr.flows.len() {
        rr.recv(idx)?;
    }
    let mut last_activity = Instant::now();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(rr.flows.len() * 2);
    let batch = WakeBatch { want: 1, max_delay_us: 0 };
    loop {
        // At the stop, one more look collects answers whose completions were still queued.
        let stopping = cfg.halt.load(Ordering::Relaxed);
        wait_for_completions(&mut rr.ring, cfg.wait, last_activity, Duration::from_millis(100), batch)?;
        cqes.clear();
        cqes.extend(rr.ring.completion().map(|c| (c.user_data(), c.result())));
        if cqes.is_empty() && stopping {
            break;
        }
        if !cqes.is_empty() {
            last_activity = Instant::now();
        }
        for &(ud, res) in &cqes {
            let UserData { index: idx, op, .. } = UDP_RR.unpack(ud);
            let f = &mut rr.flows[idx];
            if op == RECV {
                f.recv_armed = false;
                if res > 0 && !f.send_inflight {
                    let Flow { send, recv, .. } = f;
                    send[..tag].copy_from_slice(&recv[..tag]);
                    if cfg.trip_times {
                        send[STAMP].copy_from_slice(&realtime_ns().to_be_bytes());
                    }
                    rr.send(idx)?;
                } else {
                    // An error (ICMP from a client that went away) or a request that came
                    // while the previous answer was still going out: wait for the next.
                    rr.recv(idx)?;
                }
                continue;
            }
            f.send_inflight = false;
            if res == cfg.resp_len as i32 {
                f.transactions += 1;
                counters.add(f.queue as usize, 1);
            } else if res < 0 {
                f.error.get_or_insert_with(|| format!("answer failed: {}", errno_text(res)));
            }
            if !f.recv_armed {
                rr.recv(idx)?;
            }
        }
    }
    Ok(rr.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mptcp::StreamProtocol;
    use crate::uring::ring::WaitMode;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        (a, b)
    }

    fn config(req: u32, resp: u32, time: Duration, timeout: Duration) -> RrConfig {
        let now = Instant::now();
        RrConfig {
            wait: WaitMode::Sleep,
            ring: RingPaths::default(),
            req_len: req,
            resp_len: resp,
            deadline: now + time,
            window: (now, now + time),
            timeout,
            halt: Arc::new(AtomicBool::new(false)),
            protocol: StreamProtocol::Tcp,
            bounceback: 1,
            trip_times: false,
            live: None,
        }
    }

    #[test]
    fn every_answered_request_is_one_transaction_on_both_ends() {
        let (client, server) = pair();
        let cfg = config(64, 200, Duration::from_millis(300), Duration::from_millis(200));
        let server_cfg = cfg.clone();
        let server_counters = Arc::new(QueueCounters::new(1));
        let sc = Arc::clone(&server_counters);
        let srv = std::thread::spawn(move || {
            run_server(vec![UdpRrFlow { socket: server, queue: 0 }], &sc, &server_cfg).unwrap()
        });
        let counters = QueueCounters::new(1);
        let res = run_client(vec![UdpRrFlow { socket: client, queue: 0 }], &counters, &cfg).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        cfg.halt.store(true, Ordering::Relaxed);
        let served = srv.join().unwrap();
        let done = res.flows[0].bytes;
        assert!(done > 100, "loopback answers thousands of transactions in 300 ms, got {done}");
        assert_eq!(served[0].bytes, done, "server answers = client transactions on a lossless path");
        assert_eq!(res.failures, RrFailures::default(), "nothing lost on loopback");
        let recorded = res.latency_ns.len();
        assert!(
            recorded + 1 >= done && recorded <= done,
            "all but one finishing after the window: {recorded} of {done}"
        );
    }

    #[test]
    fn a_silent_server_costs_one_timeout_per_transaction_and_the_flow_ends() {
        let (client, _silent) = pair();
        let cfg = config(1, 1, Duration::from_millis(120), Duration::from_millis(50));
        let counters = QueueCounters::new(1);
        let t = Instant::now();
        let res = run_client(vec![UdpRrFlow { socket: client, queue: 0 }], &counters, &cfg).unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "bounded by deadline + timeout: {:?}", t.elapsed());
        assert_eq!(res.flows[0].bytes, 0);
        assert!((2..=4).contains(&res.failures.timeouts), "120 ms / 50 ms timeouts: {:?}", res.failures);
    }

    #[test]
    fn trip_times_split_each_round_trip_at_the_servers_stamp() {
        let (client, server) = pair();
        let mut cfg = config(16, 32, Duration::from_millis(200), Duration::from_millis(200));
        cfg.trip_times = true;
        let server_cfg = cfg.clone();
        let srv = std::thread::spawn(move || {
            run_server(vec![UdpRrFlow { socket: server, queue: 0 }], &QueueCounters::new(1), &server_cfg).unwrap()
        });
        let res = run_client(vec![UdpRrFlow { socket: client, queue: 0 }], &QueueCounters::new(1), &cfg).unwrap();
        cfg.halt.store(true, Ordering::Relaxed);
        srv.join().unwrap();
        let legs = res.trip.expect("legs with --trip-times");
        assert_eq!(legs.request.len(), res.latency_ns.len(), "one pair of legs per round trip");
        assert_eq!(legs.negative, 0, "one clock");
        // The legs add up to the round trip (3 significant digits, two clock readings apart).
        let sum = legs.request.mean() + legs.response.mean();
        let rtt = res.latency_ns.mean();
        assert!((sum - rtt).abs() <= 0.1 * rtt, "legs {sum:.0} ns against a {rtt:.0} ns round trip");
    }

    #[test]
    fn tags_fit_the_smaller_message() {
        assert_eq!(tag_len(1), 1);
        assert_eq!(tag_len(8), 8);
        assert_eq!(tag_len(1 << 20), 8);
    }
}
