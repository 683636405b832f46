//! Bulk stream over TCP: the sender writes as fast as allowed, the receiver counts.
//!
//! Both ends agree on the test over the control channel, start when the receiver says
//! `Ready`, measure their own window by their own clock, and the receiver's figures travel
//! back so the sender prints both sides. The headline is the receiver's. The sender runs
//! through the one sender sequence ([`crate::session::sequence`]) as a `TcpSender`; the halves
//! here, [`TcpHalves`], run in each direction through [`crate::runtime::side::halves`].

use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, TestSpec};
use crate::metrics::data_path::{DataPath, Wake};
use crate::metrics::figures::{Role, SideReport, StreamReport};
use crate::runtime::nic_queues::{queue_table, FlowArrival, TestQueues};
use crate::runtime::placement::Placement;
use crate::runtime::side::halves::{send_halves, Halves, Indexed, StreamHalves};
use crate::runtime::side::{Live, SideEnd, SideProbes, TestSide, STOP_LINGER};
use crate::session::control;
use crate::session::driver::serve_stream;
use crate::session::live::{Observer, Quiet, SenderLive, ServerStop};
use crate::session::sender::{decide_zerocopy, SendOptions, SenderSession, CONNECT_TIMEOUT};
use crate::session::sequence::{run_test, Ended, SenderTest};
use crate::session::server::ServedReports;
use crate::sys::netpath::PathProbe;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt::{self, FlowSocket};
use crate::sys::tcpinfo::TcpInfo;
use crate::transport::tcp::recv::{self as tcp_recv, RecvFlow, RecvWorkerConfig};
use crate::transport::tcp::recv_zc as tcp_recv_zc;
use crate::transport::tcp::send::{self as tcp_send, SendFlow, SendWorkerConfig, ZeroCopyCounts};
use crate::uring::ring::WaitMode;
use crate::uring::ring::WakeBatch;
use crate::workload::latency_probe::{stream_report_with, SenderProbe};
use std::io::Write;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffers per receive ring and their size: 2 MiB per queue thread, small enough to stay
/// mostly in cache, large enough for bundles of dozens of segments.
pub(crate) const RECV_BUF_COUNT: u16 = 64;
pub(crate) const RECV_BUF_SIZE: u32 = 32 * 1024;
/// A sleeping receive thread is woken once per 8 completions or 200 us, whichever comes
/// first: measured on the veth pair, this cut the waker's CPU (the sender's, where veth runs
/// the receive softirq) enough to raise 16-queue throughput from ~14.5 to ~24 Gbit/s and
/// halve CPU-seconds per GB; larger batches starved the TCP window of a single flow.
pub(crate) const RECV_BATCH: WakeBatch = WakeBatch { want: 8, max_delay_us: 200 };

/// Receive low-water mark for unpaced streams: the softirq that queues data (on veth, the
/// sender's CPU) signals the socket once per 128 KiB instead of once per packet. With 16
/// flows on the veth pair this raised throughput from ~24 to ~40 Gbit/s; one flow was
/// unchanged. FIN still wakes the reader, so the tail below the mark is never stranded.
pub(crate) const RECV_LOWAT: u32 = 128 * 1024;

/// The low-water mark for a test: at most 1 ms of a paced flow's data, so that interval
/// figures of slow flows stay smooth; none below 4 KiB.
pub(crate) fn recv_lowat(spec: &TestSpec) -> Option<u32> {
    if spec.rate_bps == 0 {
        return Some(RECV_LOWAT);
    }
    let per_flow_bytes_per_ms = spec.rate_bps / 8 / u64::from(spec.flows().max(1)) / 1000;
    let lowat = per_flow_bytes_per_ms.min(u64::from(RECV_LOWAT)) as u32;
    (lowat >= 4096).then_some(lowat)
}

/// A sleeping send thread waits for half its in-flight sends (at most 4) or 200 us.
fn send_batch(inflight: u32) -> WakeBatch {
    WakeBatch { want: (inflight / 2).clamp(1, 4), max_delay_us: 200 }
}

/// Duplicates of the flows' sockets for the sampler, in flow order: TCP_INFO stays readable
/// after a queue thread closed its own copy, and a reused descriptor number can never be
/// read by mistake.
fn sampler_sockets<'a>(streams: impl Iterator<Item = &'a TcpStream>) -> Result<Vec<TcpStream>> {
    streams.map(|s| s.try_clone().map_err(|e| Error::io("duplicating a flow socket for TCP_INFO", e))).collect()
}

/// Runs a stream test against `recv` at `opts.target` (TCP or UDP), in the direction the spec
/// asks: forward (this side sends), reverse (the receiver's host sends back over flows this
/// side opened) or both at once.
///
/// Errors before the test starts (unreachable, refused, bad options) come back as `Err`; once
/// data flows, problems are recorded in the report (`complete() == false`) so the partial
/// figures are still shown.
pub fn run_send(opts: &SendOptions) -> Result<StreamReport> {
    run_send_live(opts, Arc::new(Quiet))
}

/// [`run_send`], with `observer` told of the start and of each interval as it closes.
pub fn run_send_live(opts: &SendOptions, observer: Arc<dyn Observer>) -> Result<StreamReport> {
    if opts.spec.proto == crate::base::spec::Proto::Udp {
        return super::udp_stream::run_send_udp(opts, observer);
    }
    run_test(opts, TcpSender { opts, zc: (false, String::new()), probe: None }, observer)
}

/// A TCP stream in the sender's one sequence: connected flows, each greeted, and the TCP
/// engine's halves.
struct TcpSender<'a> {
    opts: &'a SendOptions,
    /// Whether SEND_ZC is used, and why (decided before the hello).
    zc: (bool, String),
    /// `--latency`: the probe beside the flows.
    probe: Option<SenderProbe>,
}

impl SenderTest for TcpSender<'_> {
    type Prepared = ();
    type Flows = Vec<Indexed<TcpStream>>;
    type Local = Halves;
    type Report = StreamReport;

    fn prepare(&mut self, session: &mut SenderSession) -> Result<((), Vec<u16>)> {
        self.zc = zerocopy_for(&self.opts.spec, &session.caps, &session.path)?;
        Ok(((), Vec::new()))
    }

    fn open(&mut self, session: &mut SenderSession, (): ()) -> Result<Self::Flows> {
        let (opts, spec) = (self.opts, &self.opts.spec);
        let peer = session.peer.clone();
        let ports = session.steer(spec, &opts.local, opts.port);
        self.probe = if spec.latency { Some(SenderProbe::open_tcp(session, opts)?) } else { None };
        let mut flows = Vec::with_capacity(spec.flows() as usize);
        for flow in 0..spec.data_connections() {
            let local = match ports.get(flow as usize).copied().flatten() {
                Some(port) => opts.local.with_port(port),
                None => opts.local.for_flow(flow).map_err(Error::usage)?,
            };
            let mut stream =
                control::connect_from(&opts.target, opts.port, CONNECT_TIMEOUT, &local, Some(&spec.tuning))?;
            stream
                .write_all(&session.data_hello(flow, &stream)?)
                .map_err(|e| Error::peer(format!("opening data flow {flow} to {peer}: {e}")))?;
            flows.push((flow, stream));
        }
        Ok(flows)
    }

    fn observer(&mut self, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
        self.probe.as_ref().map_or(observer.clone(), |p| p.watch(&self.opts.spec, observer))
    }

    fn run(&mut self, session: &SenderSession, flows: Self::Flows, t0: Instant, live: &SenderLive) -> Result<Halves> {
        let spec = &self.opts.spec;
        let (placement, caps, zc) = (&session.placement, &session.caps, self.zc.clone());
        let iface = session.path.interface().map(str::to_string);
        send_halves(&TcpHalves { spec, placement, caps, zc, iface, queues: None }, spec, flows, t0, live)
    }

    fn report(self, halves: Halves, end: Ended) -> StreamReport {
        stream_report_with(self.probe, &self.opts.spec, halves, end)
    }
}

/// The TCP engine's halves of a stream test: what the driver needs to send or receive on
/// connected TCP flows.
pub(crate) struct TcpHalves<'a> {
    pub spec: &'a TestSpec,
    pub placement: &'a Placement,
    pub caps: &'a KernelCaps,
    /// Whether SEND_ZC is used, and why.
    pub zc: (bool, String),
    /// The interface facing the peer, whose counters the window reads.
    pub iface: Option<String>,
    /// Receiving on a NIC with queues: which queues the test is served from.
    pub queues: Option<&'a TestQueues>,
}

impl StreamHalves for TcpHalves<'_> {
    type Flow = TcpStream;
    fn send(&self, flows: Vec<Indexed<TcpStream>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        send_side(self, flows, t0, live)
    }
    fn receive(&self, flows: Vec<Indexed<TcpStream>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        receive_side(self, flows, t0, live, RecvEnd::Eof)
    }
}

/// How a receiving half knows its flows are over.
pub(crate) enum RecvEnd<'a> {
    /// At the far sender's EOF, within the planned end and a grace.
    Eof,
    /// At EOF however long the test runs (the caller shuts the flows for reading when it
    /// learns, on a channel of its own, that they are over), or once `ended()` says so, at
    /// most until `until`.
    Until { until: Instant, ended: &'a dyn Fn() -> bool },
}

impl TcpHalves<'_> {
    /// The receiving half, its window sampled from `t0`, ended by `end` rather than by EOF.
    pub(crate) fn receive_until(
        &self,
        flows: Vec<Indexed<TcpStream>>,
        t0: Instant,
        live: &dyn Live,
        end: RecvEnd,
    ) -> Result<SideReport> {
        receive_side(self, flows, t0, live, end)
    }
}

/// The serving side of an accepted test on `recv`, whatever its direction: receives forward
/// flows, sends on reverse flows, both at once for `--bidir`. Returns the report of what it
/// received (forward) and of what it sent (reverse).
pub(crate) fn serve_test(
    ctl: &mut TcpStream,
    stop: &ServerStop,
    spec: &TestSpec,
    flows: Vec<(u32, TcpStream)>,
    placement: &Placement,
    queues: Option<&TestQueues>,
    caps: &KernelCaps,
) -> Result<ServedReports> {
    let (zc, iface) = if spec.direction == Direction::Forward {
        let iface = ctl.peer_addr().ok().and_then(|a| crate::sys::hostinfo::route_to(a.ip()).ok()).map(|r| r.ifname);
        ((false, String::new()), iface)
    } else {
        let peer_ip =
            ctl.peer_addr().map_err(|e| Error::io("reading the control peer address", e))?.ip().to_canonical();
        let path = PathProbe::to(peer_ip, spec.flows());
        (zerocopy_for(spec, caps, &path)?, path.interface().map(str::to_string))
    };
    serve_stream(ctl, stop, spec, &TcpHalves { spec, placement, caps, zc, iface, queues }, flows)
}

/// The sending half of a test over connected TCP flows: queue threads write until the
/// planned end, the sampler measures the window, the flows are half-closed.
fn send_side(h: &TcpHalves, flows: Vec<(u32, TcpStream)>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
    let (spec, placement, caps, zc) = (h.spec, h.placement, h.caps, &h.zc);
    let zerocopy = zc.0;
    tune_flows(spec, &flows, true)?;
    let probes = sampler_sockets(flows.iter().map(|(_, f)| f))?;
    let side = TestSide::new(Role::Sender, spec, placement, live);
    let items = side.by_queue(flows, |flow, queue, stream| SendFlow {
        stream,
        queue,
        budget: spec.tuning.flow_bytes(flow, spec.flows()),
    });
    let total_flows = spec.flows().max(1) as u64;
    let input = |(_, flows): (u32, Vec<SendFlow>)| {
        let cfg = SendWorkerConfig {
            wait: placement.wait,
            ring: placement.fast.ring(),
            batch: send_batch(flows.len() as u32 * spec.depth),
            len: spec.len,
            depth: spec.depth,
            zerocopy,
            deadline: t0 + spec.total(),
            halt: Some(side.halt()),
            rate_bps: spec.rate_bps * flows.len() as u64 / total_flows,
            burst: spec.burst.unwrap_or(0),
            drain_limit: Duration::from_secs(5),
        };
        (flows, cfg)
    };
    let threads = side.spawn(items, input, |(flows, cfg), counters| tcp_send::run(flows, counters, &cfg))?;
    let fds: Vec<RawFd> = probes.iter().map(|p| p.as_raw_fd()).collect();
    // Stopped early: the flows end now (drained and half-closed), not after the cool-down.
    let run =
        side.run(threads, t0, SideProbes { sockets: &fds, iface: h.iface.as_deref(), udp: &[] }, SideEnd::AtDeadline)?;
    let tcp_end: Vec<Option<TcpInfo>> = fds.iter().map(|&fd| TcpInfo::read(fd)).collect();
    let flow_sockets: Vec<FlowSocket> = probes.iter().map(FlowSocket::read).collect();
    let mptcp = crate::sys::mptcp::read_flows(spec.tuning.mptcp, &fds);
    drop(probes);

    let results = &run.results;
    let outcomes: Vec<_> = results.iter().flat_map(|r| r.flows.iter().cloned()).collect();
    let mut zc_counts = ZeroCopyCounts::default();
    results.iter().for_each(|r| zc_counts.merge(&r.zerocopy));
    let mut sender = side.report(&run, &outcomes);
    sender.tcp_flows_end = tcp_end;
    let window_note = sockopt::window_note(&spec.tuning, &flow_sockets);
    sender.flow_sockets = flow_sockets;
    sender.set_data_path(DataPath::TcpSend {
        zerocopy,
        len: spec.len,
        depth: spec.depth,
        deferred_task_run: caps.defer_taskrun,
        wake: wake(placement.wait, send_batch(spec.depth), caps),
    });
    sender.add_path_notes(window_note);
    sender.set_mptcp(mptcp);
    // A fallback is not an error: the test ran, by copying; the zero-copy line says why.
    let used = zerocopy && results.iter().all(|r| r.zerocopy_used);
    let reason = match results.iter().find_map(|r| r.note.clone()) {
        Some(note) => format!("{}; {note}", zc.1),
        None => zc.1.clone(),
    };
    sender.set_zerocopy(&format!("{:?}", spec.zerocopy).to_lowercase(), used, reason, &zc_counts);
    Ok(sender)
}

/// The receiving half of a test over connected TCP flows: arms every flow, measures the
/// window by this side's clock from now, and waits until `end`: the flows' EOF, or a sign of its own.
fn receive_side(
    h: &TcpHalves,
    flows: Vec<(u32, TcpStream)>,
    t0: Instant,
    live: &dyn Live,
    end: RecvEnd,
) -> Result<SideReport> {
    let (spec, placement, caps) = (h.spec, h.placement, h.caps);
    tune_flows(spec, &flows, false)?;
    let probes = sampler_sockets(flows.iter().map(|(_, s)| s))?;
    let flow_ids: Vec<u32> = flows.iter().map(|(f, _)| *f).collect();
    let side = TestSide::new(Role::Receiver, spec, placement, live);
    // On a NIC with queues, each flow is served by the thread of the queue it arrived on.
    let handoff = h.queues.filter(|q| !q.by_rules).map(|q| {
        let fds: Vec<(u32, RawFd)> = flows.iter().map(|(f, s)| (*f, s.as_raw_fd())).collect();
        q.hand_off_sockets(spec.queues, &fds)
    });
    let queue_of =
        |flow: u32| handoff.as_ref().map_or(spec.queue_of_flow(flow), |h| h.engine_queue_of(flow, spec.queues));
    let items = side.by_queue_of(flows, queue_of, |_, queue, stream| RecvFlow { stream, queue });
    let cfg = RecvWorkerConfig {
        wait: placement.wait,
        ring: placement.fast.ring(),
        batch: RECV_BATCH,
        buf_count: RECV_BUF_COUNT,
        buf_size: RECV_BUF_SIZE,
        bundle: caps.recvsend_bundle,
        rcvlowat: recv_lowat(spec),
        halt: side.halt(),
        skip_copy: spec.tuning.skip_rx_copy,
    };
    let zc_rx = placement.fast.zc_rx.as_ref();
    // With --zc-rx, thread i receives from its own NIC queue (QUEUE + i, or the i-th kept out of RSS).
    let thread_zc_rx = zc_rx.cloned();
    let threads = side.spawn(
        items,
        |input| input,
        move |(thread, flows), counters| match &thread_zc_rx {
            Some(zc) => {
                let rxq = zc
                    .queue_of_thread(thread)
                    .ok_or_else(|| Error::unsupported(zc.too_few_queues(thread as usize + 1).unwrap_or_default()))?;
                tcp_recv_zc::run(flows, counters, &cfg, zc, rxq)
            }
            None => tcp_recv::run(flows, counters, &cfg),
        },
    )?;
    let fds: Vec<RawFd> = probes.iter().map(|p| p.as_raw_fd()).collect();
    let napi = placement.fast.napi_evidence(&fds);
    // Stopped early, the far sender ends its flows too: their FINs end the wait, at most
    // STOP_LINGER after the stop.
    let probed = SideProbes { sockets: &fds, iface: h.iface.as_deref(), udp: &[] };
    let ending = match end {
        RecvEnd::Eof => SideEnd::WithTheSender,
        RecvEnd::Until { until, ended } => {
            SideEnd::Receive { until, ended, after_stop: Some(STOP_LINGER), before_release: None }
        }
    };
    let run = side.run(threads, t0, probed, ending)?;
    let tcp_end: Vec<Option<TcpInfo>> = fds.iter().map(|&fd| TcpInfo::read(fd)).collect();
    let flow_sockets: Vec<FlowSocket> = probes.iter().map(FlowSocket::read).collect();
    let mptcp = crate::sys::mptcp::read_flows(spec.tuning.mptcp, &fds);
    let nic_queues = h.queues.map(|q| {
        let arrivals: Vec<FlowArrival> = flow_ids
            .iter()
            .zip(&probes)
            .zip(&tcp_end)
            .filter_map(|((&flow, sock), info)| {
                FlowArrival::read(flow, sock, queue_of(flow), info.map_or(0, |i| i.bytes_received))
            })
            .collect();
        let polled: Vec<(usize, u64, u64)> = placement
            .threads
            .iter()
            .zip(&run.results)
            .map(|(t, r)| (t.cpu, r.completions, r.polled_completions))
            .collect();
        queue_table(q, placement, &arrivals, &polled)
    });
    drop(probes);
    let results = &run.results;
    let outcomes: Vec<_> = results.iter().flat_map(|r| r.flows.iter().cloned()).collect();
    let completions: u64 = results.iter().map(|r| r.completions).sum();
    let rearms: u64 = results.iter().map(|r| r.rearms).sum();
    let mut report = side.report(&run, &outcomes);
    report.tcp_flows_end = tcp_end;
    report.nic_queues = nic_queues;
    let window_note = sockopt::window_note(&spec.tuning, &flow_sockets);
    report.flow_sockets = flow_sockets;
    let total: u64 = outcomes.iter().map(|o| o.bytes).sum();
    let bytes_per_completion = total as f64 / completions.max(1) as f64;
    let zc_queues: Vec<u32> = zc_rx
        .map(|zc| (0..placement.threads.len() as u32).filter_map(|t| zc.queue_of_thread(t)).collect())
        .unwrap_or_default();
    report.set_data_path(match zc_rx {
        Some(zc) => DataPath::ZeroCopyReceive {
            interface: zc.iface.clone(),
            first_queue: zc_queues.iter().copied().min().unwrap_or(0),
            last_queue: zc_queues.iter().copied().max().unwrap_or(0),
            queues: zc_queues,
            area_bytes: crate::uring::zcrx::AREA_BYTES as u64,
            bytes_per_completion,
            rearms,
        },
        None => DataPath::TcpReceive {
            bundles: caps.recvsend_bundle,
            skip_rx_copy: spec.tuning.skip_rx_copy,
            buffers: u32::from(RECV_BUF_COUNT),
            buffer_bytes: RECV_BUF_SIZE,
            lowat_bytes: recv_lowat(spec),
            bytes_per_completion,
            rearms,
            wake: wake(placement.wait, RECV_BATCH, caps),
        },
    });
    let handed = handoff.map(|h| h.line);
    report.add_path_notes(napi.into_iter().chain(handed).chain(window_note));
    report.set_mptcp(mptcp);
    Ok(report)
}

/// Whether this test's TCP sends use SEND_ZC, and why: never on MPTCP flows (the kernel
/// refuses zero-copy sends on MPTCP sockets; `--zerocopy on` with `-m` is refused up front).
pub(crate) fn zerocopy_for(spec: &TestSpec, caps: &KernelCaps, path: &PathProbe) -> Result<(bool, String)> {
    if spec.tuning.mptcp {
        return Ok((false, "MPTCP sockets have no zero-copy send".into()));
    }
    decide_zerocopy(spec.zerocopy, caps, path, spec.len)
}

/// Applies the test's knobs to each flow this side holds (`sends`: the flows it sends on).
fn tune_flows(spec: &TestSpec, flows: &[(u32, TcpStream)], sends: bool) -> Result<()> {
    for (flow, stream) in flows {
        sockopt::apply_tuning(stream, &spec.tuning, sends)
            .map_err(|e| Error::io(format!("setting the test's socket options on flow {flow}"), e))?;
    }
    Ok(())
}

/// How sleeping threads are woken, when they sleep at all.
fn wake(wait: WaitMode, batch: WakeBatch, caps: &KernelCaps) -> Wake {
    if wait == WaitMode::Spin || batch.want <= 1 {
        Wake::Unbatched
    } else if caps.min_wait_timeout {
        Wake::Batched { completions: batch.want, max_delay_us: batch.max_delay_us }
    } else {
        Wake::PerCompletion
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_water_mark_follows_the_rate() {
        let unpaced = TestSpec::default();
        assert_eq!(recv_lowat(&unpaced), Some(RECV_LOWAT), "unpaced streams use the full mark");
        let fast = TestSpec { rate_bps: 100_000_000_000, ..TestSpec::default() };
        assert_eq!(recv_lowat(&fast), Some(RECV_LOWAT), "fast paced flows are capped at the full mark");
        let mid = TestSpec { rate_bps: 1_000_000_000, queues: 2, ..TestSpec::default() };
        assert_eq!(recv_lowat(&mid), Some(62_500), "1 ms of a 500 Mbit/s flow");
        let slow = TestSpec { rate_bps: 10_000_000, ..TestSpec::default() };
        assert_eq!(recv_lowat(&slow), None, "slow flows keep the kernel default");
    }

    struct Unwatched;
    impl Live for Unwatched {
        fn stopped(&self) -> Option<String> {
            None
        }
        fn interval(&self, _role: Role, _interval: crate::metrics::figures::IntervalFigures) {}
    }

    /// The receiving half measures its window from the `t0` it is given (recv's Ready), not
    /// from the end of its own setup: a sender that ends its flow at `t0` plus the test leaves
    /// a complete receiver window even after a slow setup (here 100 ms of a 600 ms test, with
    /// no warm-up, so the first sample comes when the threads have started).
    #[test]
    fn the_receiving_half_measures_from_the_t0_it_is_given() {
        use crate::runtime::placement::{plan, BusyPoll};
        use crate::sys::affinity::allowed_cpus;
        use std::net::TcpListener;
        let spec = TestSpec { time_ms: 600, warmup_ms: 0, cooldown_ms: 0, queues: 1, ..TestSpec::default() };
        let caps = KernelCaps::detect().expect("kernel capabilities");
        let placement =
            plan(1, &allowed_cpus(), BusyPoll::Off, false, false, &Default::default()).expect("a placement");
        let halves = TcpHalves {
            spec: &spec,
            placement: &placement,
            caps: &caps,
            zc: (false, String::new()),
            iface: None,
            queues: None,
        };
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut tx = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (rx, _) = listener.accept().expect("accept");
        let t0 = Instant::now();
        let end = t0 + spec.total();
        let writer = std::thread::spawn(move || {
            let chunk = [7u8; 16 * 1024];
            let mut sent = 0u64;
            while Instant::now() < end {
                tx.write_all(&chunk).expect("write");
                sent += chunk.len() as u64;
                std::thread::sleep(Duration::from_millis(1));
            }
            sent // dropped: EOF at the planned end
        });
        std::thread::sleep(Duration::from_millis(100));
        let report = halves.receive(vec![(0, rx)], t0, &Unwatched).expect("receive");
        let sent = writer.join().expect("writer");
        assert!(report.complete, "the window ends with the flow, not 100 ms later: {:?}", report.errors);
        assert!((0.35..0.6).contains(&report.window_seconds), "window {:.3} s", report.window_seconds);
        let received: u64 = report.queues.iter().map(|q| q.total_bytes).sum();
        assert_eq!(received, sent, "every byte written was counted");
    }
}
