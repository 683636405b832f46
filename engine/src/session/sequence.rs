//! The sending host's one sequence, for every workload (TCP, UDP and AF_XDP streams, rr and
//! crr): open the control session, set up what must fail before the far end starts anything,
//! agree on the test, open the flows, wait for the far end's `Ready` (and `--start-at`'s
//! instant), run this host's side or sides, collect the far end's report, and build the one
//! report.
//!
//! A workload supplies only what differs, as a [`SenderTest`]: its flows, opened around the
//! hello, the side it runs (a stream engine's halves, `runtime::side::halves`, or rr's
//! client) and the report it builds from both ends.

use crate::base::error::Result;
use crate::base::start_at::StartAt;
use crate::session::live::{Observer, SenderLive};
use crate::session::sender::{FarReports, SendOptions, SenderSession};
use std::sync::Arc;
use std::time::Instant;

/// What a workload adds to the sender's one sequence.
pub(crate) trait SenderTest {
    /// What [`prepare`](Self::prepare) sets up for [`open`](Self::open).
    type Prepared;
    /// The flows, as [`open`](Self::open) leaves them for the side.
    type Flows;
    /// What this host's side or sides measured.
    type Local;
    /// The test's one report.
    type Report;
    /// What the far end is called in the report's errors ("receiver"; rr's is a "server").
    const FAR_END: &'static str = "receiver";

    /// Before the hello, right after the control channel is open: sets up what must fail
    /// before the far end starts anything (sockets, zero-copy's decision). Returns the UDP
    /// source ports the hello announces (none for TCP).
    fn prepare(&mut self, session: &mut SenderSession) -> Result<(Self::Prepared, Vec<u16>)>;

    /// Once the far end accepted: opens (or, for UDP and crr, readies) the flows.
    fn open(&mut self, session: &mut SenderSession, prepared: Self::Prepared) -> Result<Self::Flows>;

    /// Where the test's intervals go: the caller's observer, or one that wraps it.
    fn observer(&mut self, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
        observer
    }

    /// Runs this host's side (or sides) over `flows`, its window from `t0`, watched by `live`.
    fn run(
        &mut self,
        session: &SenderSession,
        flows: Self::Flows,
        t0: Instant,
        live: &SenderLive,
    ) -> Result<Self::Local>;

    /// The one report: what this host measured beside what the far end sent back.
    fn report(self, local: Self::Local, end: Ended) -> Self::Report;
}

/// The sequence's end, handed to the workload's report: the session, the far end's reports,
/// when the data began (`--start-at`), and the live watch (whose intervals the reports take).
pub(crate) struct Ended {
    pub session: SenderSession,
    pub far: FarReports,
    pub began: Option<StartAt>,
    pub live: SenderLive,
}

/// Runs `test` against the far end `opts` names: the one sequence every workload's sender
/// goes through. Errors before the data flows (unreachable, refused, bad options) are `Err`;
/// once it flows, problems are in the report.
pub(crate) fn run_test<T: SenderTest>(
    opts: &SendOptions,
    mut test: T,
    observer: Arc<dyn Observer>,
) -> Result<T::Report> {
    let spec = &opts.spec;
    let mut session = SenderSession::connect(opts)?;
    let (prepared, udp_ports) = test.prepare(&mut session)?;
    session.negotiate(spec, udp_ports)?;
    let flows = test.open(&mut session, prepared)?;
    session.wait_ready()?;
    // `--start-at`: the one point between ready and the data where the start is awaited.
    let began = session.release_start(spec)?;
    let live = session.start_live(spec, test.observer(observer))?;
    let local = test.run(&session, flows, Instant::now(), &live)?;
    let far = session.far_reports(&live, T::FAR_END);
    Ok(test.report(local, Ended { session, far, began, live }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::spec::TestSpec;
    use crate::metrics::figures::{Role, SideReport};
    use crate::runtime::side::Live;
    use crate::session::control::{read_msg, write_msg, ControlMsg};
    use crate::session::live::Quiet;
    use crate::session::sender::scripted;
    use std::time::Duration;

    /// A workload that notes each step the sequence takes it through.
    #[derive(Default)]
    struct Noting {
        steps: Vec<&'static str>,
    }

    impl SenderTest for Noting {
        type Prepared = u16;
        type Flows = u16;
        type Local = &'static str;
        type Report = (Vec<&'static str>, FarReports);
        const FAR_END: &'static str = "server";

        fn prepare(&mut self, session: &mut SenderSession) -> Result<(u16, Vec<u16>)> {
            assert_eq!(session.cookie, [0; 16], "prepared before the accept");
            self.steps.push("prepare");
            Ok((41, vec![5001, 5002]))
        }
        fn open(&mut self, session: &mut SenderSession, prepared: u16) -> Result<u16> {
            assert_eq!(session.cookie, [7; 16], "opened after the accept");
            self.steps.push("open");
            Ok(prepared + 1)
        }
        fn observer(&mut self, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
            self.steps.push("observer");
            observer
        }
        fn run(&mut self, _: &SenderSession, flows: u16, _: Instant, live: &SenderLive) -> Result<&'static str> {
            assert_eq!(flows, 42, "the side gets the flows open made");
            assert_eq!(live.stopped(), None);
            self.steps.push("run");
            Ok("report")
        }
        fn report(mut self, local: &'static str, end: Ended) -> Self::Report {
            assert!(end.began.is_none(), "no --start-at");
            self.steps.push(local);
            (self.steps, end.far)
        }
    }

    /// One test through the sequence against a scripted far end: the hello carries the ports
    /// `prepare` chose, the flows open after the accept, the side runs after `Ready`, and
    /// the far end's report (read here from the wire) reaches the workload's report.
    #[test]
    fn a_test_runs_its_steps_in_order_and_gets_the_far_ends_report() {
        let spec = TestSpec { time_ms: 100, warmup_ms: 0, ..TestSpec::default() };
        let mut theirs = SideReport::build(Role::Receiver, &spec, &Default::default(), &[], &[]);
        theirs.placement = "the far end's own line".into();
        let sent = theirs.clone();
        let (port, far) = scripted::receiver(move |mut s, hello| {
            let ControlMsg::Hello { udp_ports, .. } = hello else { panic!("expected a hello") };
            write_msg(&s, &scripted::plain_accept()).unwrap();
            write_msg(&s, &ControlMsg::Ready).unwrap();
            // The report after the sender's side ran: the sequence reads it only then.
            std::thread::sleep(Duration::from_millis(100));
            write_msg(&s, &ControlMsg::Result { report: Some(Box::new(sent)), reverse: None }).unwrap();
            // Held open until the sender is done with it.
            while read_msg(&mut s, Duration::from_secs(5)).is_ok() {}
            udp_ports
        });
        let opts = scripted::options(port, spec);
        let (steps, far_reports) = run_test(&opts, Noting::default(), Arc::new(Quiet)).unwrap();
        assert_eq!(steps, ["prepare", "open", "observer", "run", "report"]);
        assert_eq!(far.join().unwrap(), [5001, 5002], "the hello announced prepare's ports");
        assert_eq!(far_reports.error, None);
        let forward = far_reports.forward.expect("the far end's report");
        assert_eq!((forward.role, forward.placement), (theirs.role, theirs.placement));
        assert!(far_reports.reverse.is_none());
    }

    /// A far end that goes away before reporting: the report's error names it as the
    /// workload calls it, with its address.
    #[test]
    fn a_far_end_that_vanishes_is_named_as_the_workload_calls_it() {
        let spec = TestSpec { time_ms: 100, warmup_ms: 0, ..TestSpec::default() };
        let (port, far) = scripted::receiver(move |s, _| {
            write_msg(&s, &scripted::plain_accept()).unwrap();
            write_msg(&s, &ControlMsg::Ready).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        });
        let opts = scripted::options(port, spec);
        let (_, far_reports) = run_test(&opts, Noting::default(), Arc::new(Quiet)).unwrap();
        far.join().unwrap();
        let error = far_reports.error.expect("no report is an error");
        assert!(error.starts_with(&format!("server 127.0.0.1:{port} vanished before reporting")), "{error}");
        assert!(far_reports.forward.is_none());
    }
}
