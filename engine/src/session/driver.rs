//! What the control protocol adds to a stream test's halves, which run protocol-free in
//! [`crate::runtime::side::halves`]: on the sending host, the one report of this host's halves
//! beside the far end's ([`stream_report`]); on `recv`, the `Ready` (and `--start-at`'s
//! `start`) before the halves and the watch of the control channel for the whole test, once
//! for all engines ([`serve_stream`]): a `stop`, a signal, or the sender's control connection
//! closing ends the test (see [`crate::session::live::ServerLive`]).

use crate::base::error::Result;
use crate::base::spec::TestSpec;
use crate::metrics::figures::StreamReport;
use crate::runtime::side::halves::{run_halves, End, Halves, Indexed, StreamHalves};
use crate::session::control::{self, ControlMsg};
use crate::session::live::{ServerLive, ServerStop};
use crate::session::sequence::Ended;
use crate::session::server::ServedReports;
use std::net::TcpStream;
use std::time::Instant;

/// The one report of a stream test on the sending host: this host's halves beside the far
/// end's reports (each direction's sender and receiver paired).
pub(crate) fn stream_report(spec: &TestSpec, mut halves: Halves, end: Ended) -> StreamReport {
    halves.stamp_start(end.began);
    let Ended { session, far, live, .. } = end;
    match halves {
        Halves::Sent(sent) => session.finish(spec, sent, far, live),
        Halves::Received(received) => session.finish_reverse(spec, received, far, live),
        Halves::Both { sent, received } => session.finish_bidir(spec, (sent, received), far, live),
    }
}

/// `recv`'s side of an accepted stream test whose flows are in place: says `Ready`, runs the
/// halves while watching the control channel, and returns the report of what it received
/// (forward flows) and of what it sent (reverse flows).
pub(crate) fn serve_stream<H: StreamHalves>(
    ctl: &mut TcpStream,
    stop: &ServerStop,
    spec: &TestSpec,
    h: &H,
    flows: Vec<Indexed<H::Flow>>,
) -> Result<ServedReports> {
    // `--start-at`: after Ready the sender waits for its instant and says `start`; the live
    // watch takes the control channel only after that message is read here.
    let began = match spec.start_at {
        Some(_) => {
            control::write_msg(ctl, &ControlMsg::Ready)?;
            let peer = ctl.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
            Some(crate::session::start::await_start(ctl, &peer)?)
        }
        None => None,
    };
    let live = ServerLive::start(ctl, stop)?;
    // Data that arrives before the queue threads arm their receives waits in the socket
    // buffers, so saying Ready first loses nothing.
    if began.is_none() {
        control::write_msg(ctl, &ControlMsg::Ready)?;
    }
    // Both ends' windows start at Ready: here as it leaves, on the sender as it arrives, each
    // before its own setup. A receiver that started its clock after setting up its threads
    // ended its window after the sender's flows had (CI: `-t 1s --cooldown 0s` on a loaded
    // receiver, "the flows ended before the measured window did").
    let t0 = Instant::now();
    let mut halves = run_halves(h, spec, End::Receiver, flows, t0, &live)?;
    halves.stamp_start(began);
    Ok(match halves {
        Halves::Sent(sent) => ServedReports { received: None, sent: Some(sent) },
        Halves::Received(received) => ServedReports::received(received),
        Halves::Both { sent, received } => ServedReports { received: Some(received), sent: Some(sent) },
    })
}
