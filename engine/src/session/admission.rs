//! What `recv` runs now, per source (an IPv4 address or an IPv6 /64, [`Source`]) and in all:
//! tests, their planned seconds, and the data flows their senders are still opening. A hello is admitted against these
//! ([`Admissions::admit`], on the accept thread, so a refusal costs no thread); an admitted
//! test holds a [`SessionSlot`] that gives its share back however the test ends.

use crate::session::receiver::ServerLimits;
use crate::session::source::Source;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// How many tests, and how many seconds of them, one source runs now.
#[derive(Debug, Default, Clone, Copy)]
struct SourceUse {
    sessions: usize,
    ms: u64,
    /// Data flows its accepted tests still wait for: they may be in their handshake at once
    /// beyond `--max-pending-per-source` (a 1,024-flow test opens them all together).
    flows_awaited: usize,
}

/// The tests running on a receiver, counted in all and per source.
#[derive(Debug, Default)]
pub(crate) struct Admissions {
    running: AtomicUsize,
    sources: Mutex<HashMap<Source, SourceUse>>,
}

impl Admissions {
    fn sources(&self) -> MutexGuard<'_, HashMap<Source, SourceUse>> {
        self.sources.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tests running now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Data flows the tests of `source` still wait for.
    pub(crate) fn flows_awaited(&self, source: Source) -> usize {
        self.sources().get(&source).map_or(0, |u| u.flows_awaited)
    }

    /// Admits a test of `ms` planned milliseconds from `peer` within `limits` (at most
    /// `max_sessions` at once: 1 with `--once`), or says which limit it is over.
    pub(crate) fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        ms: u64,
        limits: &ServerLimits,
        max_sessions: usize,
    ) -> Result<SessionSlot, String> {
        let source = Source::of(peer);
        let mut sources = self.sources();
        let running = self.running();
        let mine = sources.get(&source).copied().unwrap_or_default();
        if running >= max_sessions {
            return Err(format!("receiver busy: {running} tests running (limit {max_sessions})"));
        }
        if mine.sessions >= limits.max_sessions_per_source {
            return Err(format!(
                "receiver busy: {} tests from {source} running (recv --max-sessions-per-source {})",
                mine.sessions, limits.max_sessions_per_source
            ));
        }
        if mine.ms.saturating_add(ms) > limits.max_total_ms {
            return Err(format!(
                "tests from {source} would run {:.0} s at once, this receiver allows {:.0} s per source (recv --max-time)",
                mine.ms.saturating_add(ms) as f64 / 1e3,
                limits.max_total_ms as f64 / 1e3
            ));
        }
        let u = sources.entry(source).or_default();
        u.sessions += 1;
        u.ms += ms;
        let others = self.running.fetch_add(1, Ordering::AcqRel);
        Ok(SessionSlot { admissions: Arc::clone(self), source, ms, others })
    }
}

/// A running test's place in the counts; given back when dropped, however the test ends (a
/// panic included).
#[derive(Debug)]
pub(crate) struct SessionSlot {
    admissions: Arc<Admissions>,
    source: Source,
    ms: u64,
    /// Tests that were running when this one was admitted.
    pub(crate) others: usize,
}

impl SessionSlot {
    /// Counts `n` data flows as awaited from this test's source until the guard drops.
    pub(crate) fn await_flows(&self, n: usize) -> FlowsAwaited<'_> {
        if let Some(u) = self.admissions.sources().get_mut(&self.source) {
            u.flows_awaited += n;
        }
        FlowsAwaited { slot: self, n }
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.admissions.running.fetch_sub(1, Ordering::AcqRel);
        let mut sources = self.admissions.sources();
        if let Some(u) = sources.get_mut(&self.source) {
            u.sessions = u.sessions.saturating_sub(1);
            u.ms = u.ms.saturating_sub(self.ms);
            if u.sessions == 0 {
                sources.remove(&self.source);
            }
        }
    }
}

/// A test's data flows counted as awaited from its source while it waits for them.
pub(crate) struct FlowsAwaited<'a> {
    slot: &'a SessionSlot,
    n: usize,
}

impl Drop for FlowsAwaited<'_> {
    fn drop(&mut self) {
        if let Some(u) = self.slot.admissions.sources().get_mut(&self.slot.source) {
            u.flows_awaited = u.flows_awaited.saturating_sub(self.n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn each_limit_refuses_with_its_own_reason_and_a_dropped_slot_gives_its_share_back() {
        let limits = ServerLimits { max_sessions_per_source: 2, max_total_ms: 25_000, ..ServerLimits::default() };
        let a = Arc::new(Admissions::default());
        let first = a.admit(ip(1), 10_000, &limits, 3).unwrap();
        let second = a.admit(ip(1), 10_000, &limits, 3).unwrap();
        assert_eq!((first.others, second.others, a.running()), (0, 1, 2));
        let per_source = a.admit(ip(1), 1_000, &limits, 3).unwrap_err();
        assert!(per_source.contains("2 tests from 10.0.0.1 running"), "{per_source}");
        drop(second);
        let seconds = a.admit(ip(1), 20_000, &limits, 3).unwrap_err();
        assert!(seconds.contains("would run 30 s at once") && seconds.contains("25 s per source"), "{seconds}");
        let _other = a.admit(ip(2), 1_000, &limits, 3).unwrap();
        let _third = a.admit(ip(3), 1_000, &limits, 3).unwrap();
        let total = a.admit(ip(4), 1_000, &limits, 3).unwrap_err();
        assert_eq!(total, "receiver busy: 3 tests running (limit 3)");
        drop(first);
        assert!(a.admit(ip(1), 25_000, &limits, 3).is_ok(), "the source's seconds came back");
    }

    #[test]
    fn addresses_of_one_ipv6_64_are_one_source() {
        let limits = ServerLimits { max_sessions_per_source: 2, ..ServerLimits::default() };
        let a = Arc::new(Admissions::default());
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let _one = a.admit(v6("fd00:1:2:3::1"), 1_000, &limits, 8).unwrap();
        let _two = a.admit(v6("fd00:1:2:3::2"), 1_000, &limits, 8).unwrap();
        let third = a.admit(v6("fd00:1:2:3:ffff::9"), 1_000, &limits, 8).unwrap_err();
        assert!(third.contains("2 tests from fd00:1:2:3::/64 running"), "{third}");
        assert!(a.admit(v6("fd00:1:2:4::1"), 1_000, &limits, 8).is_ok(), "the next /64 is another source");
    }

    #[test]
    fn awaited_flows_count_for_their_source_until_the_guard_drops() {
        let a = Arc::new(Admissions::default());
        let slot = a.admit(ip(1), 1_000, &ServerLimits::default(), 4).unwrap();
        let awaited = slot.await_flows(1024);
        assert_eq!((a.flows_awaited(Source::of(ip(1))), a.flows_awaited(Source::of(ip(2)))), (1024, 0));
        drop(awaited);
        assert_eq!(a.flows_awaited(Source::of(ip(1))), 0);
        drop(slot);
        assert_eq!(a.running(), 0);
    }
}
