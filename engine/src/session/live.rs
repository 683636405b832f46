//! A running test as both hosts see it while it runs: intervals stream to the far end as they
//! close, and either end can stop the test early (Ctrl-C, SIGTERM, `recv` shutting down).
//!
//! Every side of a test runs watched by a [`Live`] (through
//! `runtime::side::TestSide`): its sampler polls [`Live::stopped`] and hands it
//! each closed interval. On `recv`'s host
//! ([`ServerLive`]) intervals go over the control channel and are not kept. On the sending
//! host ([`SenderLive`]) they are paired with the far end's (received figures beside offered
//! ones), shown to an [`Observer`] as each pair is complete, and kept for the final report.

use crate::base::error::Result;
use crate::base::spec::{Direction, TestSpec};
use crate::base::stop::StopToken;
use crate::metrics::figures::{Host, IntervalFigures, Role, Roles, SideReport};
use crate::runtime::side::Live;
use crate::session::control::{ControlMsg, CtlWatch, CtlWriter, CTL_WRITE_TIMEOUT, MAX_FRAME, MAX_REPORT};
use crate::session::progress::NoProgress;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Per-flow TCP_INFO entries of intervals the sending host keeps for the final report
/// (about 100 bytes each): 1,048,576 is 16 flows for 18 hours at 1 s, or 64 flows for 4.5
/// hours at 100 ms. Later intervals keep their sums and per-queue bytes; their per-flow
/// entries are only in the live output (`--json-stream`).
pub(crate) const KEPT_FLOW_ENTRIES: usize = 1 << 20;

/// A stop of this host's token ends the test; the far end is told once, so it stops too.
fn local_stop(stop: &StopToken, writer: &CtlWriter, told: &AtomicBool, who: &str) -> Option<String> {
    let reason = format!("{} on the {who}", stop.cause()?);
    if !told.swap(true, Ordering::AcqRel) {
        let _ = writer.send(&ControlMsg::Stop { reason: reason.clone() });
    }
    Some(reason)
}

/// `recv`'s side of a test: intervals go to the sender as they close; a `stop` from the
/// sender, the sender's control connection closing (the sender was killed, or went away
/// without a word), a stop of `recv`'s token (a signal), or flows that move nothing for the
/// no-progress limit end the test.
pub(crate) struct ServerLive {
    pub watch: CtlWatch,
    writer: CtlWriter,
    told: AtomicBool,
    stop: StopToken,
    idle: NoProgress,
}

impl ServerLive {
    /// Starts watching the control channel once the test is accepted and its flows are in.
    pub(crate) fn start(ctl: &TcpStream, stop: &ServerStop) -> Result<Self> {
        // A sender sends nothing during a test but small messages (stop, finished).
        let watch = CtlWatch::start(ctl, MAX_FRAME, Box::new(|_, _| {}))?;
        let writer = CtlWriter::new(ctl, CTL_WRITE_TIMEOUT)?;
        let idle = NoProgress::new(stop.no_progress);
        Ok(Self { watch, writer, told: AtomicBool::new(false), stop: stop.token.clone(), idle })
    }
}

/// What ends a test on `recv` besides its sender: the receiver's stop token, and its
/// no-progress limit (`recv --no-progress-limit`; zero: none).
#[derive(Debug, Clone, Default)]
pub struct ServerStop {
    pub token: StopToken,
    pub no_progress: Duration,
}

impl Live for ServerLive {
    fn stopped(&self) -> Option<String> {
        self.watch
            .stop_reason()
            .or_else(|| self.watch.closed().map(|e| format!("the sender went away: {e}")))
            .or_else(|| local_stop(&self.stop, &self.writer, &self.told, "receiver"))
            .or_else(|| {
                // The sender is told, as for a stop on this host, so that its report says why.
                let reason = self.idle.stalled()?;
                if !self.told.swap(true, Ordering::AcqRel) {
                    let _ = self.writer.send(&ControlMsg::Stop { reason: format!("receiver: {reason}") });
                }
                Some(reason)
            })
    }
    fn progress(&self, role: Role, bytes: u64) {
        self.idle.saw(role, bytes);
    }
    fn abandoned(&self) -> bool {
        self.idle.stalled().is_some()
    }
    fn interval(&self, role: Role, mut interval: IntervalFigures) {
        // The report shows the receiver's bytes per interval and the sender's TCP view; the
        // receiver's own per-flow TCP_INFO per interval would only grow the message.
        if role == Role::Receiver {
            interval.tcp_flows.clear();
            interval.tcp_retransmits.clear();
        }
        let _ = self.writer.send(&ControlMsg::Interval { role, interval });
    }
}

/// What the sending host knows when the test starts: enough for the header.
#[derive(Debug, Clone)]
pub struct StartInfo {
    pub spec: TestSpec,
    /// The receiver's control address as connected.
    pub target: String,
    /// Who sends the data and who receives it (under `--bidir`, in its forward half).
    pub roles: Roles,
    /// This host's queue threads and CPUs, in one line.
    pub this_placement: String,
    /// The far host's, from its accept.
    pub far_placement: String,
}

impl StartInfo {
    /// Each host's placement line with the host it is and its role in the data flow: (label,
    /// line), the data sender first; under `--bidir` each host plays both roles.
    pub fn placements(&self) -> [(String, &str); 2] {
        let (this, far) = (self.this_placement.as_str(), self.far_placement.as_str());
        let roles = &self.roles;
        if self.spec.direction == Direction::Bidir {
            return [
                (format!("{} (sends and receives)", roles.host_name(Host::This)), this),
                (format!("{} (sends and receives)", roles.host_name(Host::Far)), far),
            ];
        }
        let line = |host: Host| if host == Host::This { this } else { far };
        [(roles.label(Role::Sender), line(roles.data_sender)), (roles.label(Role::Receiver), line(roles.data_receiver))]
    }
}

/// Watches a test from the sending host as it runs (the CLI's live output).
pub trait Observer: Send + Sync {
    /// The test is agreed and its flows are open; it starts now.
    fn started(&self, _start: &StartInfo) {}
    /// Interval `n` of `direction` closed: the receiver's figures, and the sender's for the
    /// same stretch when they are known.
    fn interval(
        &self,
        _direction: Direction,
        _n: usize,
        _received: &IntervalFigures,
        _offered: Option<&IntervalFigures>,
    ) {
    }
    /// `--latency`: the probe's round trips over interval `n` of the load's direction, told
    /// right after that interval.
    fn latency(&self, _n: usize, _figures: &crate::metrics::latency::LatencyInterval) {}
}

/// An observer that watches nothing (sweeps, `--repeat` summaries).
pub struct Quiet;
impl Observer for Quiet {}

/// Intervals of one direction, as they arrive from either end.
#[derive(Default)]
struct Pairs {
    received: Vec<IntervalFigures>,
    offered: Vec<IntervalFigures>,
    /// Intervals already shown to the observer.
    shown: usize,
}

struct Store {
    forward: Pairs,
    reverse: Pairs,
    kept_flow_entries: usize,
    /// Streams pair the far end's figures with ours; transaction tests show the client's
    /// intervals alone, as they close.
    paired: bool,
}

impl Store {
    fn new(paired: bool) -> Self {
        Self { forward: Pairs::default(), reverse: Pairs::default(), kept_flow_entries: 0, paired }
    }
}

/// The sending host's side of a test: the far end's intervals and ours, paired and kept; a
/// stop of this host's token (a signal, a library caller) or a `stop` from `recv` ends the test.
pub(crate) struct SenderLive {
    pub watch: CtlWatch,
    writer: CtlWriter,
    told: AtomicBool,
    stop: StopToken,
    store: Arc<Mutex<Store>>,
    observer: Arc<dyn Observer>,
}

impl SenderLive {
    /// Starts watching `ctl`; `paired`: whether intervals wait for the far end's half.
    pub(crate) fn start(ctl: &TcpStream, observer: Arc<dyn Observer>, paired: bool, stop: StopToken) -> Result<Self> {
        let store = Arc::new(Mutex::new(Store::new(paired)));
        let (remote_store, remote_observer) = (Arc::clone(&store), Arc::clone(&observer));
        let watch = CtlWatch::start(
            ctl,
            MAX_REPORT,
            Box::new(move |role, iv| add(&remote_store, remote_observer.as_ref(), false, role, iv)),
        )?;
        Ok(Self {
            watch,
            writer: CtlWriter::new(ctl, CTL_WRITE_TIMEOUT)?,
            told: AtomicBool::new(false),
            stop,
            store,
            observer,
        })
    }

    /// The intervals this run kept, put into the reports they belong to: forward flows
    /// (`sender` offered them, `receiver` received them), reverse flows likewise. Intervals
    /// still unshown (the far end's report arrived, ours did not pair) are shown first.
    pub(crate) fn attach(
        &self,
        forward: (Option<&mut SideReport>, Option<&mut SideReport>),
        reverse: (Option<&mut SideReport>, Option<&mut SideReport>),
    ) {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        for (direction, (sender, receiver)) in [(Direction::Forward, forward), (Direction::Reverse, reverse)] {
            let pairs = match direction {
                Direction::Reverse => &mut store.reverse,
                _ => &mut store.forward,
            };
            while pairs.shown < pairs.received.len() {
                let n = pairs.shown;
                self.observer.interval(direction, n, &pairs.received[n], pairs.offered.get(n));
                pairs.shown += 1;
            }
            if let Some(s) = sender {
                s.intervals = std::mem::take(&mut pairs.offered);
            }
            if let Some(r) = receiver {
                r.intervals = std::mem::take(&mut pairs.received);
            }
        }
    }
}

/// Files one interval: `local` says whether this host measured it. Shows every interval
/// whose pair is now complete, in order.
fn add(store: &Mutex<Store>, observer: &dyn Observer, local: bool, role: Role, iv: IntervalFigures) {
    let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
    // Sending host: its sender serves forward flows, its receiver reverse ones; the far end's
    // roles are the other way round.
    let direction = if (role == Role::Sender) == local { Direction::Forward } else { Direction::Reverse };
    let flows = iv.tcp_flows.len();
    let over_budget = store.kept_flow_entries + flows > KEPT_FLOW_ENTRIES;
    if !over_budget {
        store.kept_flow_entries += flows;
    }
    let paired = store.paired;
    let pairs = match direction {
        Direction::Reverse => &mut store.reverse,
        _ => &mut store.forward,
    };
    let offered = role == Role::Sender;
    if !paired {
        let n = pairs.offered.len();
        observer.interval(direction, n, &iv, None);
    }
    let list = if offered { &mut pairs.offered } else { &mut pairs.received };
    list.push(iv);
    while pairs.shown < pairs.received.len() && pairs.shown < pairs.offered.len() {
        let n = pairs.shown;
        observer.interval(direction, n, &pairs.received[n], Some(&pairs.offered[n]));
        pairs.shown += 1;
    }
    if over_budget {
        // Shown already with its flows; kept without them.
        let list = if offered { &mut pairs.offered } else { &mut pairs.received };
        if let Some(last) = list.last_mut() {
            last.tcp_flows = Vec::new();
        }
    }
}

impl Live for SenderLive {
    fn stopped(&self) -> Option<String> {
        self.watch.stop_reason().or_else(|| local_stop(&self.stop, &self.writer, &self.told, "sender"))
    }
    fn interval(&self, role: Role, interval: IntervalFigures) {
        add(&self.store, self.observer.as_ref(), true, role, interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(n: usize, flows: usize) -> IntervalFigures {
        IntervalFigures {
            start: n as f64,
            end: n as f64 + 1.0,
            bytes: vec![n as u64],
            tcp: Default::default(),
            tcp_flows: vec![None; flows],
            tcp_retransmits: vec![],
            udp: None,
            cpu: None,
        }
    }

    #[derive(Default)]
    struct Seen(Mutex<Vec<(Direction, usize, bool)>>);
    impl Observer for Seen {
        fn interval(&self, d: Direction, n: usize, _r: &IntervalFigures, offered: Option<&IntervalFigures>) {
            self.0.lock().unwrap().push((d, n, offered.is_some()));
        }
    }

    #[test]
    fn intervals_are_shown_once_both_halves_are_in_and_in_order() {
        let store = Mutex::new(Store::new(true));
        let seen = Seen::default();
        add(&store, &seen, true, Role::Sender, iv(0, 1));
        add(&store, &seen, true, Role::Sender, iv(1, 1));
        assert!(seen.0.lock().unwrap().is_empty(), "nothing shown before the receiver's figures arrive");
        add(&store, &seen, false, Role::Receiver, iv(0, 0));
        add(&store, &seen, false, Role::Receiver, iv(1, 0));
        // The far end's sender (reverse flows) and this host's receiver.
        add(&store, &seen, true, Role::Receiver, iv(0, 0));
        add(&store, &seen, false, Role::Sender, iv(0, 1));
        assert_eq!(
            *seen.0.lock().unwrap(),
            vec![(Direction::Forward, 0, true), (Direction::Forward, 1, true), (Direction::Reverse, 0, true)]
        );
    }

    #[test]
    fn per_flow_entries_beyond_the_budget_are_shown_but_not_kept() {
        let store = Mutex::new(Store { kept_flow_entries: KEPT_FLOW_ENTRIES - 3, ..Store::new(true) });
        add(&store, &Quiet, true, Role::Sender, iv(0, 2));
        add(&store, &Quiet, true, Role::Sender, iv(1, 2));
        let s = store.lock().unwrap();
        assert_eq!(s.forward.offered[0].tcp_flows.len(), 2, "within the budget: kept");
        assert!(s.forward.offered[1].tcp_flows.is_empty(), "over it: sums only");
        assert_eq!(s.forward.offered[1].bytes, vec![1], "the interval itself is kept");
    }
}
