//! The receiver's log, off its accept loop: events go through a bounded queue to a thread of
//! their own (a slow terminal or a full pipe never blocks accepting; when the queue is full
//! an event is dropped and counted), and repeated lines about one source address are
//! rate-limited to a few per window with a count of the rest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Events waiting for the log thread before new ones are dropped.
pub(crate) const QUEUE_LEN: usize = 1024;

/// A bounded queue in front of `sink`, which runs on a thread of its own.
pub(crate) struct LogQueue<T> {
    tx: SyncSender<T>,
    /// Events dropped because the queue was full, not yet reported.
    dropped: Arc<AtomicU64>,
    /// Events queued and not yet written.
    queued: Arc<AtomicU64>,
}

impl<T: Send + 'static> LogQueue<T> {
    /// Starts the log thread; `dropped(n)` makes the event that reports `n` dropped ones.
    /// Without a thread (none can be started) events are written on the caller's thread.
    pub(crate) fn start(sink: Arc<dyn Fn(T) + Send + Sync>, dropped: fn(u64) -> T) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<T>(QUEUE_LEN);
        let lost = Arc::new(AtomicU64::new(0));
        let queued = Arc::new(AtomicU64::new(0));
        let (t_lost, t_queued) = (Arc::clone(&lost), Arc::clone(&queued));
        std::thread::Builder::new().name("ub-log".into()).spawn(move || {
            for event in rx {
                let n = t_lost.swap(0, Ordering::AcqRel);
                if n > 0 {
                    sink(dropped(n));
                }
                sink(event);
                t_queued.fetch_sub(1, Ordering::AcqRel);
            }
        })?;
        Ok(Self { tx, dropped: lost, queued })
    }

    /// Queues `event`, never waiting: a full queue drops it (and counts it).
    pub(crate) fn send(&self, event: T) {
        self.queued.fetch_add(1, Ordering::AcqRel);
        match self.tx.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                self.dropped.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Waits (at most `limit`) until every queued event is written.
    pub(crate) fn flush(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.queued.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Lines about one source address allowed per window by default; the rest are counted.
pub(crate) const LINES_PER_WINDOW: u32 = 5;
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Source addresses tracked at once; beyond, further sources share one count (an IPv6
/// attacker has addresses without end, the table must not grow with them).
const MAX_SOURCES: usize = 4096;

/// Per-source counts of repeated lines: `lines` per source address per [`WINDOW`].
pub(crate) struct RateLimit {
    lines: u32,
    sources: Mutex<HashMap<IpAddr, Window>>,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self::new(LINES_PER_WINDOW)
    }
}

struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

impl RateLimit {
    pub(crate) fn new(lines: u32) -> Self {
        Self { lines, sources: Mutex::new(HashMap::new()) }
    }

    /// Whether a line about `source` may be written now; if not it is counted.
    pub(crate) fn allow(&self, source: IpAddr, now: Instant) -> bool {
        let mut map = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let key = if map.len() >= MAX_SOURCES && !map.contains_key(&source) { IpAddr::from([0u8; 16]) } else { source };
        let w = map.entry(key).or_insert(Window { start: now, logged: 0, suppressed: 0 });
        if w.logged < self.lines && key == source {
            w.logged += 1;
            true
        } else {
            w.suppressed += 1;
            false
        }
    }

    /// The windows that ended by `now`, with what they suppressed: (source, count). The
    /// unspecified address stands for the sources beyond the table's size.
    pub(crate) fn expired(&self, now: Instant) -> Vec<(IpAddr, u64)> {
        let mut map = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        map.retain(|ip, w| {
            if now.duration_since(w.start) < WINDOW {
                return true;
            }
            if w.suppressed > 0 {
                out.push((*ip, w.suppressed));
            }
            false
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_and_never_blocks() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let (s, g) = (Arc::clone(&seen), Arc::clone(&gate));
        let q = LogQueue::start(
            Arc::new(move |e: u64| {
                let _wait = g.lock().unwrap();
                s.lock().unwrap().push(e);
            }),
            |n| 1_000_000 + n,
        )
        .unwrap();
        let start = Instant::now();
        for i in 0..(QUEUE_LEN as u64 + 500) {
            q.send(i);
        }
        assert!(start.elapsed() < Duration::from_secs(1), "sending never waits for the writer");
        drop(held);
        q.flush(Duration::from_secs(5));
        q.send(7);
        q.flush(Duration::from_secs(5));
        let seen = seen.lock().unwrap();
        let reported: u64 = seen.iter().filter(|&&e| e >= 1_000_000).map(|e| e - 1_000_000).sum();
        let written = seen.iter().filter(|&&e| e < 1_000_000).count() as u64;
        assert_eq!(written + reported, QUEUE_LEN as u64 + 501, "every event written or counted: {reported} dropped");
        assert!(reported >= 400, "the overflow was dropped, {reported}");
    }

    #[test]
    fn repeated_lines_are_counted_per_source_and_window() {
        let r = RateLimit::default();
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let allowed = (0..1239).filter(|_| r.allow(a, t0)).count();
        assert_eq!(allowed, LINES_PER_WINDOW as usize);
        assert!(r.allow(b, t0), "another source has its own budget");
        assert!(r.expired(t0 + Duration::from_secs(1)).is_empty(), "the window is still open");
        assert_eq!(r.expired(t0 + WINDOW), vec![(a, 1234)]);
        assert!(r.allow(a, t0 + WINDOW), "a new window starts afresh");
    }
}
