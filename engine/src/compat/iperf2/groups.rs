//! The client tests `recv --iperf2` serves: the flows of one `iperf -c [-P N]` are one group,
//! each flow holds a slot (its deadline, its stop flag) within the caps per source address and
//! in all, and a group is summarized once its last flow ended.

use super::receiver::{Caps, Iperf2Event, Iperf2EventSink, Iperf2RecvOptions, Iperf2TestSummary, PER_SOURCE};
use crate::base::spec::{Proto, TestSpec, Workload};
use crate::compat::{received_report, shown};
use crate::metrics::figures::{Roles, StreamReport, UdpFigures};
use crate::metrics::measure::QueueCounters;
use crate::metrics::seq::SeqStats;
use crate::runtime::placement::{pin_current_thread, BusyPoll};
use crate::session::gate::PerSource;
use crate::session::live::StartInfo;
use crate::session::progress::{no_progress_reason, Progress};
use crate::session::source::Source;
use crate::sys::probe::KernelCaps;
use crate::uring::ring::WaitMode;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Flows of one `iperf -c -P N` that connect within this time of the first one are one test.
pub(crate) const JOIN_WINDOW: Duration = Duration::from_secs(1);
/// How long past a client's own `-t` we wait for its flows to end.
pub(crate) const END_GRACE: Duration = Duration::from_secs(10);
/// A UDP flow that received data and then nothing for this long is over (no FIN came).
pub(crate) const UDP_IDLE_END: Duration = Duration::from_secs(3);
/// UDP peers whose test was refused are remembered (to log once) this long after their last
/// datagram, and at most this many.
const REFUSED_MEMORY: Duration = Duration::from_secs(60);
pub(super) const REFUSED_MAX: usize = 4096;
/// What the serving loop knows about one running flow.
struct FlowSlot {
    deadline: Instant,
    stop: Arc<AtomicBool>,
    /// Its bytes so far, to end a flow whose client sends nothing (the no-progress limit) or
    /// went silent without a FIN (UDP).
    counters: Option<Arc<QueueCounters>>,
    progress: Progress,
}

/// One client test being served: the flows of one `iperf -c [-P N]`.
struct Group {
    id: u64,
    proto: Proto,
    peer: IpAddr,
    version: Option<String>,
    expected: u32,
    joined: u32,
    finished: u32,
    opened: Instant,
    span: Option<(Instant, Instant)>,
    bytes: u64,
    udp: Option<SeqStats>,
    udp_seconds: f64,
    reports_sent: u32,
    flows: HashMap<u64, FlowSlot>,
    notes: Vec<String>,
    errors: Vec<String>,
    /// Each finished flow's bytes, in the order they ended, for the test's report.
    flow_bytes: Vec<u64>,
    /// Our address the client reached, from its first finished flow.
    local: Option<SocketAddr>,
    /// What the client's header asked: its `-t` (ms, 0 when it gave none) and `-b` per flow.
    time_ms: u64,
    rate_bps: u64,
}

impl Group {
    fn done(&self, now: Instant) -> bool {
        self.finished == self.joined && (self.joined >= self.expected || now.duration_since(self.opened) >= JOIN_WINDOW)
    }

    fn summary(&self) -> Iperf2TestSummary {
        let seconds = match (self.proto, self.span) {
            (Proto::Udp, _) => self.udp_seconds,
            (Proto::Tcp, Some((a, b))) => b.saturating_duration_since(a).as_secs_f64(),
            (Proto::Tcp, None) => 0.0,
        };
        let mut errors = self.errors.clone();
        if self.joined < self.expected {
            errors.push(format!(
                "{} of the {} flows the client announced arrived within {:.0} s",
                self.joined,
                self.expected,
                JOIN_WINDOW.as_secs_f64()
            ));
        }
        let report = self.report(seconds, &errors);
        Iperf2TestSummary {
            id: self.id,
            proto: self.proto,
            peer: self.peer,
            client_version: self.version.clone(),
            expected_flows: self.expected,
            flows: self.joined,
            bytes: self.bytes,
            seconds,
            udp: self.udp,
            reports_sent: self.reports_sent,
            notes: self.notes.clone(),
            errors,
            report,
        }
    }

    /// The test as our side sees it: `flows` queues of one flow, the client's `-t` and `-b`.
    fn spec(&self, flows: u32) -> TestSpec {
        TestSpec {
            proto: self.proto,
            workload: Workload::Stream,
            queues: flows.max(1),
            flows_per_queue: 1,
            time_ms: self.time_ms,
            warmup_ms: 0,
            cooldown_ms: 0,
            rate_bps: self.rate_bps.saturating_mul(u64::from(flows.max(1))),
            ..TestSpec::default()
        }
    }

    /// What `--json-stream`'s `start` says of the test as its first flow joins: the flows the
    /// client announced; `listening` is our address.
    fn start_info(&self, listening: SocketAddr) -> StartInfo {
        StartInfo {
            spec: self.spec(self.expected),
            target: shown(listening).to_string(),
            roles: Roles::inbound(self.peer.to_string()),
            this_placement: "uringbench recv --iperf2: a thread per flow".into(),
            far_placement: "iperf2 client".into(),
        }
    }

    /// The native report of the test: one queue per flow, ours the receiving side.
    fn report(&self, seconds: f64, errors: &[String]) -> StreamReport {
        let spec = self.spec(self.flow_bytes.len() as u32);
        let bytes: Vec<(u32, u64)> = self.flow_bytes.iter().enumerate().map(|(q, &b)| (q as u32, b)).collect();
        let local = self.local.map_or_else(String::new, |a| shown(a).to_string());
        let mut report = received_report(spec, (local, self.peer), "iperf2", (&bytes, seconds), errors.to_vec());
        if let (Some(side), Some(u)) = (report.receiver.as_mut(), &self.udp) {
            side.udp = Some(UdpFigures {
                datagrams: u.received,
                lost: u.lost,
                out_of_order: u.out_of_order,
                duplicates: u.duplicates,
                expected: u.expected,
                jitter_us: u.jitter_us,
                ..UdpFigures::default()
            });
        }
        report
    }
}

/// How one flow ended, handed back to its group.
#[derive(Default)]
pub(super) struct FlowEnd {
    pub(super) bytes: u64,
    pub(super) span: Option<(Instant, Instant)>,
    pub(super) udp: Option<(SeqStats, Duration, u32)>,
    pub(super) notes: Vec<String>,
    pub(super) errors: Vec<String>,
    /// Our address the client reached.
    pub(super) local: Option<SocketAddr>,
}

#[derive(Default)]
pub(super) struct State {
    groups: Vec<Group>,
    next_group: u64,
    next_flow: u64,
    pub(super) flows: u32,
    udp_sessions: u32,
    per_source: PerSource,
    pub(super) refused_udp: HashMap<SocketAddr, Instant>,
    /// Set once a test has ended with `--once`: whether it was complete.
    pub(super) once_result: Option<bool>,
}

/// What every flow thread and the serving loop of `recv --iperf2` share: its options and
/// limits, and the client tests in flight (`state`).
pub(super) struct ClientTests {
    pub(super) opts: Iperf2RecvOptions,
    pub(super) caps: Caps,
    pub(super) kernel: KernelCaps,
    pub(super) cpus: Vec<usize>,
    pub(super) next_cpu: AtomicUsize,
    pub(super) events: Iperf2EventSink,
    pub(super) state: Mutex<State>,
    /// Raised when serving ends: flow threads stop waiting.
    pub(super) stopping: AtomicBool,
}

/// What a client's header says about its test.
pub(super) struct ClientTest {
    pub(super) version: Option<String>,
    pub(super) threads: u32,
    pub(super) time: Option<Duration>,
    pub(super) rate_bps: u64,
}

/// A flow's place in its test, taken before its thread starts.
pub(super) struct Joined {
    pub(super) group: u64,
    pub(super) flow: u64,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) deadline: Instant,
}

impl ClientTests {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn wait_mode(&self) -> WaitMode {
        if self.opts.busy_poll == BusyPoll::On {
            WaitMode::Spin
        } else {
            WaitMode::Sleep
        }
    }

    /// Pins the calling flow thread to the next CPU of the list (best effort).
    fn pin(&self) {
        if !self.cpus.is_empty() {
            let i = self.next_cpu.fetch_add(1, Ordering::Relaxed) % self.cpus.len();
            let _ = pin_current_thread(self.cpus[i]);
        }
    }

    /// Registers a new flow of `peer`, in the open test of that client or a new one; `Err`
    /// says which limit it is over.
    pub(super) fn join(
        &self,
        proto: Proto,
        peer: IpAddr,
        test: &ClientTest,
        counters: Option<Arc<QueueCounters>>,
    ) -> std::result::Result<Joined, String> {
        let mut st = self.lock();
        let caps = self.caps;
        if st.flows >= caps.flows {
            return Err(format!("{} flows are being served already (--max-queues, or the open-file limit)", st.flows));
        }
        if proto == Proto::Udp && st.udp_sessions >= caps.udp_sessions {
            return Err(format!("{} UDP sessions are being served already", st.udp_sessions));
        }
        if !st.per_source.try_take(Source::of(peer), PER_SOURCE as usize) {
            return Err(format!("{PER_SOURCE} flows from {} are being served already", Source::of(peer)));
        }
        st.flows += 1;
        st.udp_sessions += u32::from(proto == Proto::Udp);
        let now = Instant::now();
        let limit = test.time.map_or(self.opts.max_time, |t| (t + END_GRACE).min(self.opts.max_time));
        let deadline = now + limit;
        let flow = st.next_flow;
        st.next_flow += 1;
        let stop = Arc::new(AtomicBool::new(self.stopping.load(Ordering::Relaxed)));
        let slot = FlowSlot { deadline, stop: Arc::clone(&stop), counters, progress: Progress::starting(now) };
        let open = st.groups.iter_mut().find(|g| {
            g.proto == proto && g.peer == peer && g.joined < g.expected && now.duration_since(g.opened) < JOIN_WINDOW
        });
        let mut started = None;
        let group = match open {
            Some(g) => {
                g.joined += 1;
                g.flows.insert(flow, slot);
                g.id
            }
            None => {
                st.next_group += 1;
                let id = st.next_group;
                st.groups.push(Group {
                    id,
                    proto,
                    peer,
                    version: test.version.clone(),
                    expected: test.threads.clamp(1, caps.flows),
                    joined: 1,
                    finished: 0,
                    opened: now,
                    span: None,
                    bytes: 0,
                    udp: None,
                    udp_seconds: 0.0,
                    reports_sent: 0,
                    flows: HashMap::from([(flow, slot)]),
                    notes: Vec::new(),
                    errors: Vec::new(),
                    flow_bytes: Vec::new(),
                    local: None,
                    time_ms: test.time.map_or(0, |t| t.as_millis() as u64),
                    rate_bps: test.rate_bps,
                });
                let listening = SocketAddr::new(self.opts.bind, self.opts.port);
                started = st.groups.last().map(|g| g.start_info(listening));
                id
            }
        };
        drop(st);
        if let Some(start) = started {
            (self.events)(Iperf2Event::Started(start));
        }
        Ok(Joined { group, flow, stop, deadline })
    }

    /// Gives back what [`Self::join`] took, for a flow whose thread never started.
    pub(super) fn leave(&self, joined: &Joined) {
        let mut st = self.lock();
        let Some(i) = st.groups.iter().position(|g| g.id == joined.group) else { return };
        let g = &mut st.groups[i];
        g.flows.remove(&joined.flow);
        g.joined -= 1;
        let (proto, peer, empty) = (g.proto, g.peer, g.joined == 0);
        if empty {
            st.groups.remove(i);
        }
        Self::release(&mut st, proto, peer);
    }

    fn release(st: &mut State, proto: Proto, peer: IpAddr) {
        st.flows = st.flows.saturating_sub(1);
        if proto == Proto::Udp {
            st.udp_sessions = st.udp_sessions.saturating_sub(1);
        }
        st.per_source.give_back(Source::of(peer));
    }

    /// Records the end of a flow; reports its test when it was the last.
    fn finish(&self, group: u64, flow: u64, end: FlowEnd) {
        let done = {
            let mut st = self.lock();
            let Some(g) = st.groups.iter_mut().find(|g| g.id == group) else { return };
            g.flows.remove(&flow);
            g.finished += 1;
            g.bytes += end.bytes;
            g.flow_bytes.push(end.bytes);
            g.local = g.local.or(end.local);
            if let Some((a, b)) = end.span {
                g.span = Some(g.span.map_or((a, b), |(s, e)| (s.min(a), e.max(b))));
            }
            if let Some((stats, duration, reports)) = end.udp {
                match &mut g.udp {
                    Some(sum) => sum.merge(&stats),
                    None => g.udp = Some(stats),
                }
                g.udp_seconds = g.udp_seconds.max(duration.as_secs_f64());
                g.reports_sent += reports;
            }
            for n in end.notes {
                if !g.notes.contains(&n) {
                    g.notes.push(n);
                }
            }
            for e in end.errors {
                if !g.errors.contains(&e) {
                    g.errors.push(e);
                }
            }
            let (proto, peer) = (g.proto, g.peer);
            Self::release(&mut st, proto, peer);
            Self::take_done(&mut st, Instant::now())
        };
        self.report(done);
    }

    /// Removes the tests that are over.
    fn take_done(st: &mut State, now: Instant) -> Vec<Iperf2TestSummary> {
        let (done, open): (Vec<Group>, Vec<Group>) =
            std::mem::take(&mut st.groups).into_iter().partition(|g| g.done(now));
        st.groups = open;
        done.iter().map(Group::summary).collect()
    }

    fn report(&self, done: Vec<Iperf2TestSummary>) {
        for summary in done {
            let complete = summary.complete();
            (self.events)(Iperf2Event::TestDone(summary));
            if self.opts.once {
                self.lock().once_result.get_or_insert(complete);
            }
        }
    }

    /// Enforces deadlines and idle ends, and reports tests whose join window closed.
    pub(super) fn tick(&self) {
        let now = Instant::now();
        let done = {
            let mut st = self.lock();
            let limit = self.opts.no_progress;
            for g in st.groups.iter_mut() {
                for slot in g.flows.values_mut() {
                    if now >= slot.deadline {
                        slot.stop.store(true, Ordering::Relaxed);
                    }
                    let Some(c) = &slot.counters else { continue };
                    let idle = slot.progress.update(c.snapshot().iter().sum::<u64>(), now);
                    let udp_over = g.proto == Proto::Udp && slot.progress.bytes() > 0 && idle >= UDP_IDLE_END;
                    let stalled = !limit.is_zero() && idle >= limit;
                    if stalled && !slot.stop.swap(true, Ordering::Relaxed) {
                        g.errors.push(no_progress_reason(limit, "received"));
                    } else if udp_over {
                        slot.stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            st.refused_udp.retain(|_, seen| now.duration_since(*seen) < REFUSED_MEMORY);
            Self::take_done(&mut st, now)
        };
        self.report(done);
    }

    pub(super) fn stop_all(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for slot in self.lock().groups.iter().flat_map(|g| g.flows.values()) {
            slot.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Hands a flow's end to its test when its thread ends, however it ends: a panic in the
/// receive loop still gives back the flow's slot and its source's count.
pub(super) struct FlowGuard<'a> {
    pub(super) shared: &'a ClientTests,
    pub(super) joined: &'a Joined,
    pub(super) end: FlowEnd,
}

impl Drop for FlowGuard<'_> {
    fn drop(&mut self) {
        let end = std::mem::take(&mut self.end);
        self.shared.finish(self.joined.group, self.joined.flow, end);
    }
}

impl<'a> FlowGuard<'a> {
    pub(super) fn new(shared: &'a ClientTests, joined: &'a Joined) -> Self {
        shared.pin();
        let end = FlowEnd { errors: vec!["the flow's thread failed (a panic)".into()], ..FlowEnd::default() };
        Self { shared, joined, end }
    }
}
