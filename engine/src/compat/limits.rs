//! What a receiver that strangers can reach keeps per source address: how many of something
//! each address holds, and refusals logged once per address per period (the rest counted).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How many of one resource (connections, flows) each source address holds.
#[derive(Debug, Default)]
pub(crate) struct PerSource {
    held: HashMap<IpAddr, u32>,
}

impl PerSource {
    /// Takes one for `ip` unless it holds `limit` already.
    pub(crate) fn try_take(&mut self, ip: IpAddr, limit: u32) -> bool {
        let n = self.held.entry(ip).or_insert(0);
        if *n >= limit {
            return false;
        }
        *n += 1;
        true
    }

    /// Gives back one that `ip` held.
    pub(crate) fn give_back(&mut self, ip: IpAddr) {
        if let Some(n) = self.held.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.held.remove(&ip);
            }
        }
    }

    pub(crate) fn held(&self, ip: IpAddr) -> u32 {
        self.held.get(&ip).copied().unwrap_or(0)
    }
}

/// Refusals are logged once per source address per `period`; the others are counted and
/// told as one line when the period ends. At most `max_sources` addresses are remembered
/// (sources of UDP can be spoofed): refusals of the others are counted together.
#[derive(Debug)]
pub(crate) struct RefusalLog {
    period: Duration,
    max_sources: usize,
    seen: HashMap<IpAddr, (Instant, u64)>,
    others: u64,
}

impl RefusalLog {
    pub(crate) fn new(period: Duration, max_sources: usize) -> Self {
        Self { period, max_sources, seen: HashMap::new(), others: 0 }
    }

    /// Whether this refusal of `ip` is to be logged (the first of its period).
    pub(crate) fn first(&mut self, ip: IpAddr, now: Instant) -> bool {
        if let Some((_, more)) = self.seen.get_mut(&ip) {
            *more += 1;
            return false;
        }
        if self.seen.len() >= self.max_sources {
            self.others += 1;
            return false;
        }
        self.seen.insert(ip, (now, 0));
        true
    }

    /// The refusals left unlogged in periods that ended by `now`: per address (`None`: the
    /// addresses beyond `max_sources`), how many.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<(Option<IpAddr>, u64)> {
        let mut told = Vec::new();
        self.seen.retain(|ip, (since, more)| {
            let over = now.duration_since(*since) >= self.period;
            if over && *more > 0 {
                told.push((Some(*ip), *more));
            }
            !over
        });
        if self.others > 0 && self.seen.len() < self.max_sources {
            told.push((None, std::mem::take(&mut self.others)));
        }
        told
    }

    pub(crate) fn period(&self) -> Duration {
        self.period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_source_counts_stop_at_the_limit_and_come_back() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut p = PerSource::default();
        assert!(p.try_take(a, 2) && p.try_take(a, 2));
        assert!(!p.try_take(a, 2), "a third is over the limit");
        assert!(p.try_take(b, 2), "another address has its own count");
        p.give_back(a);
        assert_eq!(p.held(a), 1);
        assert!(p.try_take(a, 2));
        p.give_back(b);
        p.give_back(b);
        assert_eq!(p.held(b), 0, "never below zero");
    }

    #[test]
    fn refusals_are_logged_once_per_period_and_the_rest_counted() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        let mut log = RefusalLog::new(Duration::from_secs(10), 1);
        assert!(log.first(a, t0), "the first is logged");
        for _ in 0..1234 {
            assert!(!log.first(a, t0));
        }
        assert!(!log.first(b, t0), "past max_sources: counted with the others");
        assert!(log.expire(t0 + Duration::from_secs(5)).is_empty(), "the period has not ended");
        let told = log.expire(t0 + Duration::from_secs(10));
        assert_eq!(told, vec![(Some(a), 1234), (None, 1)]);
        assert!(log.first(a, t0 + Duration::from_secs(11)), "a new period logs again");
    }
}
