//! A stream test's sides on this host, for every engine (TCP, UDP, AF_XDP): the flows split by
//! direction, and the engine's sending side, its receiving side, or both at once (`--bidir`)
//! run over them. An engine supplies only its halves ([`StreamHalves`]), each of which runs
//! one `TestSide`.
//!
//! What the control protocol adds, the far end's reports beside these and `recv`'s `Ready`
//! and watch of the control channel, is `session::driver`'s.

use super::Live;
use crate::base::error::{Error, Result};
use crate::base::spec::{Direction, TestSpec};
use crate::base::start_at::StartAt;
use crate::metrics::figures::SideReport;
use crate::runtime::threads::panic_error;
use std::time::Instant;

/// A data flow with its index in the test.
pub(crate) type Indexed<T> = (u32, T);

/// Splits the data connections of a test: forward flows (sender to receiver) come first,
/// reverse flows (receiver's host back to the sender's) after them.
pub(crate) fn split_by_direction<T>(spec: &TestSpec, flows: Vec<Indexed<T>>) -> (Vec<Indexed<T>>, Vec<Indexed<T>>) {
    let n = spec.flows();
    match spec.direction {
        Direction::Forward => (flows, Vec::new()),
        Direction::Reverse => (Vec::new(), flows),
        Direction::Bidir => {
            let (fwd, rev): (Vec<_>, Vec<_>) = flows.into_iter().partition(|(i, _)| *i < n);
            (fwd, rev.into_iter().map(|(i, s)| (i - n, s)).collect())
        }
    }
}

/// An engine's two halves of a stream test over its flows. An engine that works one way only
/// (AF_XDP) implements that half and refuses the other direction before the test, so the
/// default is never reached.
pub(crate) trait StreamHalves: Sync {
    /// What one flow is to this engine (a connected socket, a peer address).
    type Flow: Send;
    /// Sends on `flows` from `t0` until the planned end (or a stop); this side's report.
    fn send(&self, flows: Vec<Indexed<Self::Flow>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        let _ = (flows, t0, live);
        Err(Error::unsupported("this engine does not send in this direction"))
    }
    /// Receives on `flows` until the far sender ends them (or a stop), its window sampled from
    /// `t0`; this side's report.
    fn receive(&self, flows: Vec<Indexed<Self::Flow>>, t0: Instant, live: &dyn Live) -> Result<SideReport> {
        let _ = (flows, t0, live);
        Err(Error::unsupported("this engine does not receive in this direction"))
    }
}

/// What this host did in one test.
// One per test, moved once: boxing the reports would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Halves {
    Sent(SideReport),
    Received(SideReport),
    Both { sent: SideReport, received: SideReport },
}

impl Halves {
    /// `--start-at`: every side report of this host says when its data began.
    pub(crate) fn stamp_start(&mut self, began: Option<StartAt>) {
        let Some(began) = began else { return };
        match self {
            Halves::Sent(r) | Halves::Received(r) => r.data_began_unix_ns = Some(began.0),
            Halves::Both { sent, received } => {
                sent.data_began_unix_ns = Some(began.0);
                received.data_began_unix_ns = Some(began.0);
            }
        }
    }
}

/// Which end of the test this host is: the sending host's forward flows are its to send,
/// `recv`'s forward flows are its to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Sender,
    Receiver,
}

/// Runs this host's halves of a test over `flows` (every data connection, by index).
pub(crate) fn run_halves<H: StreamHalves>(
    h: &H,
    spec: &TestSpec,
    end: End,
    flows: Vec<Indexed<H::Flow>>,
    t0: Instant,
    live: &dyn Live,
) -> Result<Halves> {
    let (forward, reverse) = split_by_direction(spec, flows);
    let (tx, rx) = match end {
        End::Sender => (forward, reverse),
        End::Receiver => (reverse, forward),
    };
    let (sends, receives) = match end {
        End::Sender => (spec.direction != Direction::Reverse, spec.direction != Direction::Forward),
        End::Receiver => (spec.direction != Direction::Forward, spec.direction != Direction::Reverse),
    };
    match (sends, receives) {
        (true, false) => h.send(tx, t0, live).map(Halves::Sent),
        (false, _) => h.receive(rx, t0, live).map(Halves::Received),
        (true, true) => std::thread::scope(|scope| {
            let sending = scope.spawn(|| h.send(tx, t0, live));
            let received = h.receive(rx, t0, live);
            let sent = sending.join().unwrap_or_else(|p| Err(panic_error("the sending half", p.as_ref())));
            Ok(Halves::Both { sent: sent?, received: received? })
        }),
    }
}

/// The sending host's halves of a stream test over `flows`, from `t0`: what a stream engine's
/// run in the sender's one sequence (`session::sequence`) does, whatever the engine.
pub(crate) fn send_halves<H: StreamHalves>(
    h: &H,
    spec: &TestSpec,
    flows: Vec<Indexed<H::Flow>>,
    t0: Instant,
    live: &dyn Live,
) -> Result<Halves> {
    run_halves(h, spec, End::Sender, flows, t0, live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::figures::{IntervalFigures, Role};
    use std::sync::Mutex;

    #[test]
    fn bidir_splits_forward_first_and_renumbers_reverse() {
        let spec = TestSpec { queues: 2, direction: Direction::Bidir, ..TestSpec::default() };
        assert_eq!(spec.data_connections(), 4, "one set of flows each way");
        let (fwd, rev) = split_by_direction(&spec, (0..4).map(|i| (i, i * 10)).collect());
        assert_eq!(fwd, vec![(0, 0), (1, 10)]);
        assert_eq!(rev, vec![(0, 20), (1, 30)], "reverse flows are numbered from 0 again");
        let reverse = TestSpec { direction: Direction::Reverse, ..spec };
        let (fwd, rev) = split_by_direction(&reverse, vec![(0, 'a'), (1, 'b')]);
        assert!(fwd.is_empty() && rev.len() == 2, "--reverse: every flow carries data back");
    }

    /// Halves that note which flows each got and on which thread.
    #[derive(Default)]
    struct Noting(Mutex<Vec<(&'static str, Vec<u32>, std::thread::ThreadId)>>);
    impl Noting {
        fn report(&self, what: &'static str, role: Role, flows: Vec<Indexed<char>>) -> Result<SideReport> {
            let ids = flows.iter().map(|(i, _)| *i).collect();
            self.0.lock().unwrap().push((what, ids, std::thread::current().id()));
            Ok(SideReport::build(role, &TestSpec::default(), &Default::default(), &[], &[]))
        }
    }
    impl StreamHalves for Noting {
        type Flow = char;
        fn send(&self, flows: Vec<Indexed<char>>, _t0: Instant, _live: &dyn Live) -> Result<SideReport> {
            self.report("send", Role::Sender, flows)
        }
        fn receive(&self, flows: Vec<Indexed<char>>, _t0: Instant, _live: &dyn Live) -> Result<SideReport> {
            self.report("receive", Role::Receiver, flows)
        }
    }
    struct Idle;
    impl Live for Idle {
        fn stopped(&self) -> Option<String> {
            None
        }
        fn interval(&self, _role: Role, _interval: IntervalFigures) {}
    }

    fn run(direction: Direction, end: End) -> (Vec<(&'static str, Vec<u32>)>, bool) {
        let spec = TestSpec { queues: 2, direction, ..TestSpec::default() };
        let flows = (0..spec.data_connections()).map(|i| (i, 'x')).collect();
        let h = Noting::default();
        let halves = run_halves(&h, &spec, end, flows, Instant::now(), &Idle).unwrap();
        let both = matches!(halves, Halves::Both { .. });
        let mut seen: Vec<_> = h.0.into_inner().unwrap();
        let spawned = seen.iter().any(|(_, _, t)| *t != std::thread::current().id());
        assert_eq!(spawned, both, "only both directions at once take a second thread");
        seen.sort_by_key(|(w, _, _)| *w);
        (seen.into_iter().map(|(w, f, _)| (w, f)).collect(), both)
    }

    #[test]
    fn each_end_runs_the_halves_its_direction_asks_for() {
        assert_eq!(run(Direction::Forward, End::Sender).0, vec![("send", vec![0, 1])]);
        assert_eq!(run(Direction::Forward, End::Receiver).0, vec![("receive", vec![0, 1])]);
        assert_eq!(run(Direction::Reverse, End::Sender).0, vec![("receive", vec![0, 1])]);
        assert_eq!(run(Direction::Reverse, End::Receiver).0, vec![("send", vec![0, 1])]);
        let (sender, both) = run(Direction::Bidir, End::Sender);
        assert!(both);
        assert_eq!(sender, vec![("receive", vec![0, 1]), ("send", vec![0, 1])], "each half gets its own flows");
        assert!(run(Direction::Bidir, End::Receiver).1);
    }
}
