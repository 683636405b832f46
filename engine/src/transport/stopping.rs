//! When a sending loop stops (TCP and UDP): at its deadline, or earlier once halted; then it
//! drains its in-flight sends for at most a drain limit. One rule for both loops, so a stop
//! ends them the same way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a loop waits for completions in one go: it rechecks the halt flag this often.
const MAX_WAIT: Duration = Duration::from_millis(100);
/// How long a draining loop waits for completions in one go.
const DRAIN_WAIT: Duration = Duration::from_millis(50);

/// The stop state of one sending thread.
#[derive(Debug)]
pub(crate) struct Stopping {
    deadline: Instant,
    halt: Option<Arc<AtomicBool>>,
    drain_limit: Duration,
    /// When the drain began (the deadline, or the moment the halt was seen before it).
    drain_from: Option<Instant>,
}

impl Stopping {
    pub(crate) fn new(deadline: Instant, halt: Option<Arc<AtomicBool>>, drain_limit: Duration) -> Self {
        Self { deadline, halt, drain_limit, drain_from: None }
    }

    /// Whether the loop must stop issuing at `now` (past the deadline, or halted); the first
    /// time it says so, the drain begins.
    #[inline]
    pub(crate) fn check(&mut self, now: Instant) -> bool {
        if self.drain_from.is_some() {
            return true;
        }
        let halted = self.halt.as_ref().is_some_and(|h| h.load(Ordering::Relaxed));
        if now >= self.deadline || halted {
            self.drain_from = Some(now.min(self.deadline));
        }
        self.drain_from.is_some()
    }

    /// Whether the drain ran past its limit at `now`: what is still in flight is stuck.
    #[inline]
    pub(crate) fn drain_over(&self, now: Instant) -> bool {
        self.drain_from.is_some_and(|from| now > from + self.drain_limit)
    }

    /// How long the loop may wait for completions at `now`: until the pacer's next send
    /// (`pace_wait`) or the deadline, whichever is first, and never longer than [`MAX_WAIT`]
    /// (so a halt is seen); [`DRAIN_WAIT`] while draining.
    #[inline]
    pub(crate) fn wait_limit(&self, now: Instant, pace_wait: Option<Duration>) -> Duration {
        if self.drain_from.is_some() {
            return DRAIN_WAIT;
        }
        let until_deadline = self.deadline.saturating_duration_since(now);
        pace_wait.unwrap_or(until_deadline).min(until_deadline).min(MAX_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_starts_the_drain_and_the_limit_ends_it() {
        let t0 = Instant::now();
        let mut s = Stopping::new(t0 + Duration::from_secs(1), None, Duration::from_secs(2));
        assert!(!s.check(t0));
        assert_eq!(s.wait_limit(t0, None), MAX_WAIT, "a long way from the deadline: the wait is capped");
        let near = t0 + Duration::from_millis(990);
        assert_eq!(s.wait_limit(near, None), Duration::from_millis(10), "the wait ends at the deadline");
        assert_eq!(s.wait_limit(t0, Some(Duration::from_millis(3))), Duration::from_millis(3), "the pacer is first");
        // Seen late, the drain still counts from the deadline.
        let late = t0 + Duration::from_millis(1500);
        assert!(s.check(late));
        assert_eq!(s.wait_limit(late, Some(Duration::from_millis(1))), DRAIN_WAIT);
        assert!(!s.drain_over(t0 + Duration::from_millis(2900)));
        assert!(s.drain_over(t0 + Duration::from_millis(3100)), "two seconds after the deadline");
    }

    #[test]
    fn a_halt_stops_the_loop_before_its_deadline_and_stays_seen() {
        let t0 = Instant::now();
        let halt = Arc::new(AtomicBool::new(false));
        let mut s = Stopping::new(t0 + Duration::from_secs(60), Some(Arc::clone(&halt)), Duration::from_secs(1));
        assert!(!s.check(t0));
        halt.store(true, Ordering::Relaxed);
        let at = t0 + Duration::from_millis(200);
        assert!(s.check(at));
        halt.store(false, Ordering::Relaxed);
        assert!(s.check(at), "once stopping, always stopping");
        assert!(!s.drain_over(at + Duration::from_millis(900)));
        assert!(s.drain_over(at + Duration::from_millis(1100)), "the drain counts from the halt");
    }
}
