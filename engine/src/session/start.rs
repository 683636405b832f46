//! A synchronized start (`send --start-at`): the sender connects and negotiates a little
//! before the instant ([`prepare`]), then, between the receiver's `ready` and the first
//! byte of data, waits for the instant and says `start` ([`release`]); the receiver waits
//! for that `start` after its `ready` ([`await_start`]) and starts its window there. Each end
//! notes its own wall clock at the start, which its side report carries
//! (`data_began_unix_ns`), so a fleet's rounds can be checked for how close together their
//! runs began.

use crate::base::error::{Error, Result};
use crate::base::start_at::StartAt;
use crate::base::stop::StopToken;
use crate::session::control::{self, ControlMsg, MAX_FRAME};
use std::net::TcpStream;
use std::time::Duration;

/// How long before the instant the sender connects: enough for the control exchange, the
/// path probe and the flows on a loaded host, and short enough that a receiver holds an
/// idle session only briefly.
pub const CONNECT_LEAD: Duration = Duration::from_secs(5);

/// How long a receiver waits for `start` after its `ready`: the sender's lead plus room for
/// a slow connect. A sender that says nothing for this long is gone.
pub const START_WAIT: Duration = Duration::from_secs(20);

/// The sleeps are cut into steps this long, so a stop ends a wait promptly.
const STEP: Duration = Duration::from_millis(100);

/// The end of a wait is spent runnable rather than asleep, for a prompt start: a thread woken
/// from sleep on a busy 2-vCPU host waited up to 19 ms for a CPU, and with a 20 ms spin a
/// start there was still 14.6 ms late once (builds running beside the test); 50 ms of one CPU
/// per start leaves more room.
const SPIN: Duration = Duration::from_millis(50);

/// Before connecting: checks the instant is ahead and within a day, then sleeps until
/// [`CONNECT_LEAD`] before it (at once when it is nearer than that).
pub(crate) fn prepare(at: StartAt, stop: &StopToken) -> Result<()> {
    at.check(StartAt::now())?;
    sleep_until(StartAt(at.0.saturating_sub(CONNECT_LEAD.as_nanos() as u64)), stop)
}

/// The sender, once `ready` arrived: waits for the instant, tells the receiver the data
/// starts, and returns this host's clock as it did (late when the set-up ran past it).
pub(crate) fn release(at: StartAt, ctl: &TcpStream, stop: &StopToken) -> Result<StartAt> {
    sleep_until(at, stop)?;
    let began = StartAt::now();
    control::write_msg(ctl, &ControlMsg::Start { at_unix_ns: began.0 })?;
    Ok(began)
}

/// The receiver, after its `ready`: waits for the sender's `start` (bounded by
/// [`START_WAIT`]) and returns this host's clock as it arrived.
pub(crate) fn await_start(ctl: &mut TcpStream, peer: &str) -> Result<StartAt> {
    match control::read_msg_up_to(ctl, START_WAIT, MAX_FRAME) {
        Ok(ControlMsg::Start { .. }) => Ok(StartAt::now()),
        Ok(ControlMsg::Stop { .. }) => Err(Error::peer(format!("sender {peer} stopped before its --start-at"))),
        Ok(other) => Err(Error::protocol(format!("sender {peer} sent {} instead of start", other.kind()))),
        Err(e) => Err(Error::peer(format!(
            "sender {peer} did not start within {} s of ready (--start-at): {}",
            START_WAIT.as_secs(),
            e.message
        ))),
    }
}

/// Sleeps until `at` on the wall clock, in steps so that a stop (a signal) ends the wait; the
/// last [`SPIN`] it stays runnable (yielding).
fn sleep_until(at: StartAt, stop: &StopToken) -> Result<()> {
    loop {
        if let Some(reason) = stop.cause() {
            return Err(Error::usage(format!("stopped before --start-at {at}: {reason}")));
        }
        let left = at.since(StartAt::now());
        if left <= 0 {
            return Ok(());
        }
        let left = Duration::from_nanos(left as u64);
        if left > SPIN {
            std::thread::sleep((left - SPIN).min(STEP));
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_waits_for_the_instant_and_says_start() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut rx, _) = listener.accept().unwrap();
        let at = StartAt(StartAt::now().0 + 300_000_000);
        let began = release(at, &tx, &StopToken::default()).unwrap();
        let late = began.since(at);
        assert!((0..20_000_000).contains(&late), "began {late} ns after the instant");
        let seen = await_start(&mut rx, "test").unwrap();
        assert!(seen >= began);
    }

    #[test]
    fn a_stop_ends_the_wait_and_a_silent_sender_is_named() {
        let stop = StopToken::default();
        stop.stop("a signal");
        let e = prepare(StartAt(StartAt::now().0 + 60_000_000_000), &stop).unwrap_err();
        assert!(e.message.contains("stopped before --start-at"), "{}", e.message);
        let e = prepare(StartAt(StartAt::now().0 - 1), &StopToken::default()).unwrap_err();
        assert!(e.message.contains("in the past"), "{}", e.message);
    }
}
