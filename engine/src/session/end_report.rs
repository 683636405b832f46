//! The sender's end report: after the receiver's `result`, the sender of a forward TCP stream
//! test tells the receiver what only the sending side's kernel knows of its flows, their
//! retransmissions over its window (TCP_INFO), so that `recv --metrics` can expose them and
//! the receiver's verdict can weigh them. It is the far end's claim: every field is checked
//! against the others and the test's flows before it is used, and a receiver waits for it at
//! most [`END_REPORT_WAIT`].

use crate::base::spec::{Direction, Proto, TestSpec, Workload};
pub use crate::metrics::retransmits::SenderRetransmits;
use crate::session::control::{self, ControlMsg};
use crate::sys::tcpinfo::TcpWindow;
use std::net::TcpStream;
use std::time::Duration;

/// How long a receiver waits for the end report once its `result` is written. A sender that
/// predates the message closes the channel instead (the wait ends at once); one that holds it
/// open and says nothing costs the receiver this much.
pub const END_REPORT_WAIT: Duration = Duration::from_secs(2);

/// Whether a test's sender sends the end report: a TCP stream sent forward (the receiver sees
/// the reverse half's retransmissions itself, and UDP and rr have none).
pub fn carries_end_report(spec: &TestSpec) -> bool {
    spec.proto == Proto::Tcp && spec.workload == Workload::Stream && spec.direction == Direction::Forward
}

/// The sender, once the receiver's `result` is in: its flows' retransmissions. A receiver
/// that predates the message has closed the channel; the failed write is not an error of
/// the test.
pub(crate) fn send(ctl: &TcpStream, spec: &TestSpec, sent: &TcpWindow) {
    if carries_end_report(spec) {
        let _ = control::write_msg(ctl, &ControlMsg::SenderEnd { retransmits: SenderRetransmits::of(sent) });
    }
}

/// The receiver, after writing its `result`: the sender's end report, or why there is none
/// (an older sender closed the channel, nothing came in [`END_REPORT_WAIT`], or the claim
/// cannot be true).
pub(crate) fn receive(ctl: &mut TcpStream, spec: &TestSpec) -> Result<SenderRetransmits, String> {
    match control::read_msg(ctl, END_REPORT_WAIT) {
        Ok(ControlMsg::SenderEnd { retransmits }) => retransmits.checked(spec),
        Ok(other) => Err(format!("the sender sent {} instead of its end report", other.kind())),
        Err(e) => Err(e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(flows: u32) -> TestSpec {
        TestSpec { queues: 1, flows_per_queue: flows, ..TestSpec::default() }
    }

    #[test]
    fn the_receiver_reads_the_report_and_does_not_wait_for_an_older_sender() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut b, _) = listener.accept().unwrap();
        let spec = spec(1);
        let w = TcpWindow {
            flows: 1,
            retransmitted_segments: 4,
            bytes_sent: 9000,
            bytes_retrans: 5792,
            ..Default::default()
        };
        send(&a, &spec, &w);
        assert_eq!(receive(&mut b, &spec), Ok(SenderRetransmits::of(&w)));
        // A sender that closes without it: the receiver is told at once, not after the wait.
        drop(a);
        let began = std::time::Instant::now();
        assert!(receive(&mut b, &spec).is_err());
        assert!(began.elapsed() < Duration::from_millis(500));
    }
}
