//! The text of a synchronized start (`send --start-at`): the instant, how late the sender
//! began by its own clock, and when the receiver saw the data begin by its clock.

use crate::metrics::document::SynchronizedStart;

/// One line: `start: at 2026-12-05T10:00:00.000000000Z, sender began 0.412 ms late; receiver
/// saw the data begin at 2026-12-05T10:00:00.000493211Z (its clock)`.
pub fn start_line(s: &SynchronizedStart) -> String {
    let late_ms = s.sender_late_ns as f64 / 1e6;
    let sender = if late_ms >= 0.0 {
        format!("sender began {late_ms:.3} ms late")
    } else {
        format!("sender began {:.3} ms early", -late_ms)
    };
    let receiver = match s.receiver_began_unix_ns {
        Some(ns) => format!("; receiver saw the data begin at {} (its clock)", crate::base::start_at::StartAt(ns)),
        None => String::new(),
    };
    format!("start: at {}, {sender}{receiver}\n", s.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::start_at::StartAt;

    #[test]
    fn the_line_says_lateness_and_the_receivers_time() {
        let at = StartAt(1_796_464_800_000_000_000);
        let s = SynchronizedStart::of(at, Some(at.0 + 412_000), Some(at.0 + 493_211)).unwrap();
        assert_eq!(s.sender_late_ns, 412_000);
        assert_eq!(
            start_line(&s),
            "start: at 2026-12-05T10:00:00.000000000Z, sender began 0.412 ms late; receiver saw the data begin at 2026-12-05T10:00:00.000493211Z (its clock)\n"
        );
        assert!(SynchronizedStart::of(at, None, None).is_none(), "no sender stamp, no record");
    }
}
