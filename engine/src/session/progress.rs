//! The no-progress limit of a receiver (`recv --no-progress-limit`): a test whose flows move
//! no byte for that long ends, so that a peer that announces a test and sends nothing (or
//! stops sending, or stops reading what it asked to receive) cannot hold a test slot until
//! `--max-time`. Every receiver counts progress the same way: the bytes its loops moved, as
//! the side's sampler or the serving loop reads them.

use crate::metrics::figures::Role;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a test may move nothing before it is ended, by default: well under a minute (a
/// slot is not held for nothing), far over any stall of a working sender (a TCP
/// retransmission backoff, a paused `-b` burst).
pub const DEFAULT_NO_PROGRESS: Duration = Duration::from_secs(20);

/// One byte count followed over time: when it last changed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    bytes: u64,
    since: Instant,
}

impl Progress {
    /// Nothing moved yet, as of `now`.
    pub(crate) fn starting(now: Instant) -> Self {
        Self { bytes: 0, since: now }
    }

    /// Takes the count `bytes` read at `now`; returns how long it has not changed.
    pub(crate) fn update(&mut self, bytes: u64, now: Instant) -> Duration {
        if bytes != self.bytes {
            (self.bytes, self.since) = (bytes, now);
        }
        now.saturating_duration_since(self.since)
    }

    /// Bytes moved so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A running test's progress, per role this host plays in it (a `--bidir` test both): once
/// either has moved nothing for the limit, the test is over.
#[derive(Debug)]
pub(crate) struct NoProgress {
    limit: Duration,
    /// Sender's, then receiver's; None until its side reports a count.
    roles: Mutex<[Option<Progress>; 2]>,
    /// Set the first time the limit is seen passed: the reason, kept.
    ended: std::sync::OnceLock<String>,
    started: Instant,
}

impl NoProgress {
    /// Watches a test that starts now, with `limit` (zero: never ends it).
    pub(crate) fn new(limit: Duration) -> Self {
        Self { limit, roles: Mutex::new([None, None]), ended: std::sync::OnceLock::new(), started: Instant::now() }
    }

    /// The side playing `role` has moved `bytes` so far.
    pub(crate) fn saw(&self, role: Role, bytes: u64) {
        if self.limit.is_zero() || self.ended.get().is_some() {
            return;
        }
        let now = Instant::now();
        let mut roles = self.roles.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut roles[usize::from(role == Role::Receiver)];
        let idle = slot.get_or_insert(Progress::starting(self.started)).update(bytes, now);
        if idle >= self.limit {
            let what = if role == Role::Receiver { "received" } else { "sent (the peer read nothing)" };
            let _ = self.ended.set(no_progress_reason(self.limit, what));
        }
    }

    /// `Some(reason)` once a side has moved nothing for the limit.
    pub(crate) fn stalled(&self) -> Option<String> {
        self.ended.get().cloned()
    }
}

/// The one wording of the limit's end, for every receiver's log and report.
pub(crate) fn no_progress_reason(limit: Duration, what: &str) -> String {
    format!("nothing {what} for {} s: test ended (--no-progress-limit)", limit.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_that_stops_changing_ends_the_test_after_the_limit() {
        let t0 = Instant::now();
        let mut p = Progress::starting(t0);
        assert_eq!(
            p.update(0, t0 + Duration::from_secs(3)),
            Duration::from_secs(3),
            "nothing yet: idle from the start"
        );
        assert_eq!(p.update(10, t0 + Duration::from_secs(4)), Duration::ZERO);
        assert_eq!(p.update(10, t0 + Duration::from_secs(6)), Duration::from_secs(2));
        assert_eq!(p.bytes(), 10);

        let watch = NoProgress::new(Duration::from_millis(30));
        watch.saw(Role::Receiver, 5);
        assert_eq!(watch.stalled(), None);
        std::thread::sleep(Duration::from_millis(40));
        watch.saw(Role::Sender, 7);
        assert_eq!(watch.stalled(), None, "the sending side just started moving");
        watch.saw(Role::Receiver, 5);
        let reason = watch.stalled().expect("the receiving side stalled");
        assert!(reason.contains("nothing received for 0.03 s") && reason.contains("--no-progress-limit"), "{reason}");

        let never = NoProgress::new(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        never.saw(Role::Receiver, 0);
        assert_eq!(never.stalled(), None, "a zero limit never ends a test");
    }
}
