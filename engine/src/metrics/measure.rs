//! Counters the queue threads update and the sampler that turns them into a window.
//!
//! Queue threads only store their running byte totals (one cache line per queue, single
//! writer, no locked instruction on the hot path). A separate sampler wakes at the window's
//! boundaries (after warm-up, each interval, before cool-down; see docs/output.md), snapshots every
//! counter and the CPU clocks, and goes back to sleep, so measuring costs the data path
//! nothing.

use crate::metrics::figures::{CarrierLoss, CpuShare, IntervalCpu, IntervalFigures};
use crate::metrics::seq::{LiveStats, SeqStats};
use crate::sys::hostinfo::HostSnapshot;
use crate::sys::tcpinfo::{TcpInfo, TcpWindow};
use std::fs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[repr(align(64))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// Running byte totals, one per queue.
pub struct QueueCounters {
    bytes: Vec<PaddedCounter>,
}

impl QueueCounters {
    pub fn new(queues: usize) -> Self {
        Self { bytes: (0..queues).map(|_| PaddedCounter::default()).collect() }
    }
    /// Adds to queue `q`'s total. Each queue has exactly one writer thread.
    #[inline]
    pub fn add(&self, q: usize, n: u64) {
        let c = &self.bytes[q].0;
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> Vec<u64> {
        self.bytes.iter().map(|c| c.0.load(Ordering::Relaxed)).collect()
    }
}

/// One CPU's tick counters from /proc/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub cpu: usize,
    /// user+nice+system+irq+softirq+steal
    pub busy: u64,
    pub softirq: u64,
    pub total: u64,
}

/// One host CPU between two snapshots (see [`CpuSnapshot::host_deltas`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HostDelta {
    pub cpu: usize,
    pub busy_seconds: f64,
    pub softirq_seconds: f64,
    /// Busy ticks over the CPU's ticks in all: 0 to 1.
    pub busy_share: f64,
    pub softirq_share: f64,
}

/// CPU clocks at one instant: per-CPU busy time from /proc/stat and per-thread user/system
/// time from /proc/self/task.
#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot {
    pub host: Vec<CpuTicks>,
    /// (tid, user ticks, system ticks)
    pub threads: Vec<(i32, u64, u64)>,
}

impl CpuSnapshot {
    pub fn take(tids: &[i32]) -> Self {
        let host = fs::read_to_string("/proc/stat").map(|s| parse_proc_stat(&s)).unwrap_or_default();
        let threads = tids
            .iter()
            .filter_map(|&tid| {
                let stat = fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
                let (user, system) = parse_task_stat(&stat)?;
                Some((tid, user, system))
            })
            .collect();
        Self { host, threads }
    }

    /// Each host CPU from this snapshot to `later`: its busy and softirq seconds, and its busy
    /// and softirq shares. A share is over the CPU's own ticks (all eight /proc/stat fields)
    /// between the same two reads, as top and mpstat take it, never over a wall-clock span: the
    /// tick counters move only at tick boundaries and are read a little after the clock, so
    /// busy ticks over wall seconds read 101% for a CPU busy throughout.
    pub(crate) fn host_deltas(&self, later: &CpuSnapshot) -> Vec<HostDelta> {
        let tick = clock_ticks();
        later
            .host
            .iter()
            .filter_map(|b| {
                let a = self.host.iter().find(|h| h.cpu == b.cpu)?;
                let busy = b.busy.saturating_sub(a.busy);
                let softirq = b.softirq.saturating_sub(a.softirq);
                let total = b.total.saturating_sub(a.total);
                let share = |n: u64| if total == 0 { 0.0 } else { n as f64 / total as f64 };
                Some(HostDelta {
                    cpu: b.cpu,
                    busy_seconds: busy as f64 / tick,
                    softirq_seconds: softirq as f64 / tick,
                    busy_share: share(busy),
                    softirq_share: share(softirq),
                })
            })
            .collect()
    }

    /// Thread `tid`'s (user, system) seconds from this snapshot to `later`; None when either
    /// snapshot lacks it.
    pub(crate) fn thread_seconds(&self, later: &CpuSnapshot, tid: i32) -> Option<(f64, f64)> {
        let tick = clock_ticks();
        let a = self.threads.iter().find(|t| t.0 == tid)?;
        let b = later.threads.iter().find(|t| t.0 == tid)?;
        Some((b.1.saturating_sub(a.1) as f64 / tick, b.2.saturating_sub(a.2) as f64 / tick))
    }

    /// The CPU over the `seconds` from this snapshot to `later`: shares rounded to 1e-4 (a
    /// tick is 0.01 s, so nothing measured is lost, and a many-CPU host's document stays small).
    pub(crate) fn interval(&self, later: &CpuSnapshot, seconds: f64) -> IntervalCpu {
        let seconds = seconds.max(1e-9);
        let share = |s: f64| (s / seconds * 1e4).round() / 1e4;
        let threads: f64 = self
            .threads
            .iter()
            .filter_map(|t| self.thread_seconds(later, t.0))
            .map(|(user, system)| user + system)
            .sum();
        let rounded = |s: f64| (s * 1e4).round() / 1e4;
        IntervalCpu {
            host: self
                .host_deltas(later)
                .into_iter()
                .map(|d| CpuShare { cpu: d.cpu, utilization: rounded(d.busy_share), softirq: rounded(d.softirq_share) })
                .collect(),
            threads: share(threads),
        }
    }
}

/// Per-CPU ticks from /proc/stat. Busy is user+nice+system+irq+softirq+steal: on this kind of
/// machine a softirq tick is charged both to the task it interrupted and to softirq, so adding
/// process time to softirq would count it twice (seen on 2-vCPU cloud VMs: the sum exceeded
/// 100% of a CPU).
pub(crate) fn parse_proc_stat(text: &str) -> Vec<CpuTicks> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cpu")?;
            if !rest.starts_with(|c: char| c.is_ascii_digit()) {
                return None; // the aggregate "cpu " line
            }
            let mut fields = rest.split_whitespace();
            let id: usize = fields.next()?.parse().ok()?;
            let v: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
            if v.len() < 8 {
                return None;
            }
            let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
            let total: u64 = v.iter().take(8).sum();
            Some(CpuTicks { cpu: id, busy, softirq: v[6], total })
        })
        .collect()
}

/// (utime, stime) ticks from /proc/<pid>/task/<tid>/stat. The command name may contain spaces
/// and parentheses, so fields are counted from the last ')'.
pub(crate) fn parse_task_stat(text: &str) -> Option<(u64, u64)> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime is field 14 of the line, index 11 here.
    Some((fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?))
}

/// Clock ticks per second for /proc figures.
pub(crate) fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Nominal CPU frequency in Hz: the rated speed in the model name (`@ 2.20GHz`), else the
/// current `cpu MHz`. Used for cycles per byte, as NTttcp does, since this VM has no
/// hardware cycle counters.
pub(crate) fn nominal_cpu_hz() -> Option<f64> {
    parse_cpuinfo_hz(&fs::read_to_string("/proc/cpuinfo").ok()?)
}

pub(crate) fn parse_cpuinfo_hz(text: &str) -> Option<f64> {
    let model = text.lines().find(|l| l.starts_with("model name"));
    if let Some(ghz) = model.and_then(|l| l.rsplit_once('@')).and_then(|(_, f)| f.trim().strip_suffix("GHz")) {
        if let Ok(v) = ghz.trim().parse::<f64>() {
            return Some(v * 1e9);
        }
    }
    let mhz = text.lines().find(|l| l.starts_with("cpu MHz"))?.split(':').nth(1)?.trim().parse::<f64>().ok()?;
    Some(mhz * 1e6)
}

/// What a side samples besides its byte counters: its queue threads (for CPU time) and its
/// flows' sockets (for TCP_INFO). The sockets are duplicates owned by the sampler, so they
/// stay valid after a queue thread has closed its own copy.
pub struct SampleSources<'a> {
    pub counters: &'a QueueCounters,
    pub tids: &'a [i32],
    pub sockets: &'a [std::os::fd::RawFd],
    /// Interface whose counters (with the namespace's SNMP and softnet counters) are read at
    /// the window's first and last sample.
    pub iface: Option<&'a str>,
    /// UDP flows' accounting, published by the receiving threads.
    pub udp: &'a [LiveStats],
}

/// The figures of the stretch between samples `a` and `b`, timed from the window's `first`
/// sample.
pub(crate) fn interval_between(first: &Sample, a: &Sample, b: &Sample) -> IntervalFigures {
    IntervalFigures {
        start: (a.at - first.at).as_secs_f64(),
        end: (b.at - first.at).as_secs_f64(),
        bytes: b.bytes.iter().zip(&a.bytes).map(|(b, a)| b - a).collect(),
        tcp: TcpWindow::between(&a.tcp, &b.tcp),
        tcp_flows: b.tcp.clone(),
        tcp_retransmits: a
            .tcp
            .iter()
            .zip(&b.tcp)
            .map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => b.total_retrans.saturating_sub(a.total_retrans),
                _ => 0,
            })
            .collect(),
        udp: (!b.udp.is_empty()).then(|| SeqStats::sum(&b.udp).delta(&SeqStats::sum(&a.udp))),
        cpu: Some(a.cpu.interval(&b.cpu, (b.at - a.at).as_secs_f64())),
    }
}

/// One snapshot of counters, CPU clocks and TCP state.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub bytes: Vec<u64>,
    pub cpu: CpuSnapshot,
    /// TCP_INFO per flow, in flow order; `None` where the socket could not be read.
    pub tcp: Vec<Option<TcpInfo>>,
    /// Host counters; taken at the first and last sample of a window only.
    pub host: Option<HostSnapshot>,
    /// UDP accounting of each flow (receiver side of a UDP test only).
    pub udp: Vec<SeqStats>,
}

impl Sample {
    pub fn take(src: &SampleSources, with_host: bool) -> Self {
        Self {
            at: Instant::now(),
            bytes: src.counters.snapshot(),
            cpu: CpuSnapshot::take(src.tids),
            tcp: src.sockets.iter().map(|&fd| TcpInfo::read(fd)).collect(),
            host: src.iface.filter(|_| with_host).map(HostSnapshot::take),
            udp: src.udp.iter().map(|l| *l.lock().unwrap_or_else(|p| p.into_inner())).collect(),
        }
    }
}

/// What a side keeps of its samples: the window's first and last, nothing in between. Every
/// interval goes to the sampler's sink as it closes, so memory does not grow with the test's
/// length.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub first: Option<Sample>,
    pub last: Option<Sample>,
    /// Whether the whole planned window was sampled (false: the flows ended, or the test was
    /// stopped, before its end).
    pub complete: bool,
    /// The largest smoothed RTT of any flow read inside the window, µs: TCP_INFO is read at
    /// each sample and on every wake-up of the sampler between them (at most 20 ms apart).
    pub rtt_max_us: u32,
    /// The sampled interface without carrier inside the window, read on every wake-up.
    pub carrier_lost: Vec<CarrierLoss>,
}

impl Window {
    /// UDP receiver: its flows' accounting over the window (None without UDP accounting).
    pub(crate) fn udp(&self) -> Option<SeqStats> {
        let (first, last) = (self.first.as_ref()?, self.last.as_ref()?);
        (!last.udp.is_empty()).then(|| SeqStats::sum(&last.udp).delta(&SeqStats::sum(&first.udp)))
    }
}

/// The largest smoothed RTT among `tcp`'s flows, µs (0 without TCP flows).
fn largest_rtt(tcp: &[Option<TcpInfo>]) -> u32 {
    tcp.iter().flatten().map(|i| i.rtt_us).max().unwrap_or(0)
}

/// Where a side's closed intervals go.
pub(crate) type IntervalSink<'a> = dyn FnMut(IntervalFigures) + 'a;

/// Sleeps until each offset after `t0` and samples; stops early (with a final sample) once
/// `finished()` says the workers are done or the test must end. Each interval (two
/// consecutive samples) goes to `sink` as it closes.
pub(crate) fn sample_window(
    t0: Instant,
    offsets: impl IntoIterator<Item = Duration>,
    src: &SampleSources,
    finished: &dyn Fn() -> bool,
    sink: &mut dyn FnMut(IntervalFigures),
) -> Window {
    let mut window = Window::default();
    let mut prev: Option<Sample> = None;
    let mut offsets = offsets.into_iter().peekable();
    // The largest RTT read since the interval's first sample.
    let mut peak = 0u32;
    let mut carrier = CarrierWatch::default();
    let mut close = |window: &mut Window, prev: &mut Option<Sample>, peak: &mut u32, mut sample: Sample| {
        if let Some(p) = prev.as_ref() {
            // A thread that has exited (its flows ended first) keeps its last CPU reading.
            for t in &p.cpu.threads {
                if !sample.cpu.threads.iter().any(|s| s.0 == t.0) {
                    sample.cpu.threads.push(*t);
                }
            }
        }
        let at_sample = largest_rtt(&sample.tcp);
        if let (Some(first), Some(p)) = (window.first.as_ref(), prev.as_ref()) {
            let mut interval = interval_between(first, p, &sample);
            interval.tcp.rtt_max_us = interval.tcp.rtt_max_us.max(*peak);
            sink(interval);
        }
        if window.first.is_none() {
            window.first = Some(sample.clone());
        }
        window.rtt_max_us = window.rtt_max_us.max(*peak).max(at_sample);
        *peak = at_sample;
        *prev = Some(sample);
    };
    while let Some(offset) = offsets.next() {
        let due = t0 + offset;
        loop {
            let now = Instant::now();
            if now >= due {
                break;
            }
            if finished() {
                // The flows ended before the window did: keep what was measured.
                if window.first.is_some() {
                    close(&mut window, &mut prev, &mut peak, Sample::take(src, true));
                }
                window.last = prev;
                window.carrier_lost = carrier.end(&window);
                return window;
            }
            if let Some(first) = window.first.as_ref() {
                let rtt = src.sockets.iter().filter_map(|&fd| TcpInfo::read(fd)).map(|i| i.rtt_us).max();
                peak = peak.max(rtt.unwrap_or(0));
                carrier.look(src.iface, (now - first.at).as_secs_f64());
            }
            std::thread::sleep((due - now).min(Duration::from_millis(20)));
        }
        let edge = window.first.is_none() || offsets.peek().is_none();
        close(&mut window, &mut prev, &mut peak, Sample::take(src, edge));
    }
    window.last = prev;
    window.complete = true;
    window.carrier_lost = carrier.end(&window);
    window
}

/// Follows the sampled interface's carrier through the window.
#[derive(Default)]
struct CarrierWatch {
    iface: String,
    /// Down since this many seconds into the window.
    down_since: Option<f64>,
    lost: Vec<CarrierLoss>,
}

impl CarrierWatch {
    /// Reads `iface`'s carrier `at` seconds into the window.
    fn look(&mut self, iface: Option<&str>, at: f64) {
        let Some(iface) = iface else { return };
        let Some(up) = crate::sys::hostinfo::ifstats::carrier_up(iface) else { return };
        match (up, self.down_since) {
            (false, None) => {
                self.iface = iface.to_string();
                self.down_since = Some(at);
            }
            (true, Some(since)) => {
                self.lost.push(CarrierLoss { iface: self.iface.clone(), at_seconds: since, seconds: at - since });
                self.down_since = None;
            }
            _ => {}
        }
    }

    /// The losses seen, one still going counted to the window's end.
    fn end(mut self, window: &Window) -> Vec<CarrierLoss> {
        let end = window.first.as_ref().zip(window.last.as_ref()).map_or(0.0, |(a, b)| (b.at - a.at).as_secs_f64());
        if let Some(since) = self.down_since.take() {
            self.lost.push(CarrierLoss {
                iface: self.iface.clone(),
                at_seconds: since,
                seconds: (end - since).max(0.0),
            });
        }
        self.lost
    }
}

/// A sink that keeps every interval, for sides whose intervals stay in their own report.
pub fn keep(into: &mut Vec<IntervalFigures>) -> impl FnMut(IntervalFigures) + '_ {
    move |iv| into.push(iv)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_STAT: &str = "cpu  100 0 50 1000 5 3 7 0 0 0\n\
cpu0 60 1 30 500 2 2 4 1 0 0\n\
cpu1 40 0 20 500 3 1 3 0 0 0\n\
intr 12345\n";

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let cpus = parse_proc_stat(PROC_STAT);
        assert_eq!(cpus.len(), 2, "aggregate 'cpu' line is skipped, per-CPU lines kept");
        assert_eq!(
            cpus[0],
            CpuTicks { cpu: 0, busy: 60 + 1 + 30 + 2 + 4 + 1, softirq: 4, total: 600 },
            "busy = user+nice+system+irq+softirq+steal"
        );
        assert_eq!(cpus[1].cpu, 1);
    }

    #[test]
    fn malformed_proc_stat_yields_nothing_not_a_panic() {
        assert!(parse_proc_stat("cpu0 1 2\ncpuX 1 2 3 4 5 6 7 8\ngarbage").is_empty());
        assert!(parse_proc_stat("").is_empty());
    }

    #[test]
    fn task_stat_with_awkward_name() {
        let line = "4242 (queue 0) (x)) R 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 1 0";
        assert_eq!(parse_task_stat(line), Some((123, 45)), "fields counted from the last ')'");
        assert_eq!(parse_task_stat("4242 (short) R 1"), None, "truncated stat is None");
        assert_eq!(parse_task_stat("no paren"), None);
    }

    #[test]
    fn interval_cpu_is_the_share_of_the_interval() {
        let tick = clock_ticks();
        let t = |s: f64| (s * tick) as u64;
        let a = CpuSnapshot {
            host: vec![
                CpuTicks { cpu: 0, busy: 0, softirq: 0, total: 0 },
                CpuTicks { cpu: 3, busy: 5, softirq: 1, total: 9 },
            ],
            threads: vec![(7, 10, 10), (8, 0, 0)],
        };
        let b = CpuSnapshot {
            host: vec![
                CpuTicks { cpu: 0, busy: t(1.0), softirq: t(0.5), total: t(2.0) },
                CpuTicks { cpu: 3, busy: 5 + t(2.0), softirq: 1, total: 9 + t(2.0) },
            ],
            threads: vec![(7, 10 + t(0.5), 10 + t(0.5)), (8, t(0.25), 0)],
        };
        let c = a.interval(&b, 2.0);
        assert_eq!(
            c.host,
            vec![
                CpuShare { cpu: 0, utilization: 0.5, softirq: 0.25 },
                CpuShare { cpu: 3, utilization: 1.0, softirq: 0.0 }
            ]
        );
        assert_eq!(c.threads, 0.625, "both threads' user+system over the 2 s");
        assert_eq!(c.host_busy(), 1.5);
    }

    #[test]
    fn a_cpu_busy_throughout_is_100_percent_not_101() {
        // Read off a 2-vCPU VM: 1.00 s of wall clock between the reads, 101 ticks counted
        // (a tick boundary fell just inside each end), every one of them busy.
        let a = CpuSnapshot { host: vec![CpuTicks { cpu: 1, busy: 1000, softirq: 10, total: 1200 }], threads: vec![] };
        let b = CpuSnapshot { host: vec![CpuTicks { cpu: 1, busy: 1101, softirq: 30, total: 1301 }], threads: vec![] };
        let d = a.host_deltas(&b);
        assert_eq!(d[0].busy_share, 1.0, "busy ticks over the CPU's own ticks");
        assert!((d[0].softirq_share - 20.0 / 101.0).abs() < 1e-12);
        assert_eq!(a.interval(&b, 1.0).host[0].utilization, 1.0, "not 101 ticks over 1.00 s");
        let idle =
            CpuSnapshot { host: vec![CpuTicks { cpu: 1, busy: 1000, softirq: 10, total: 1200 }], threads: vec![] };
        assert_eq!(a.host_deltas(&idle)[0].busy_share, 0.0, "no tick between the reads: nothing busy");
    }

    #[test]
    fn cpuinfo_frequency() {
        let intel = "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\ncpu MHz\t\t: 2199.998\n";
        assert_eq!(parse_cpuinfo_hz(intel), Some(2.2e9), "rated speed wins over current");
        let amd = "model name\t: AMD EPYC 7B12\ncpu MHz\t\t: 2250.000\n";
        assert_eq!(parse_cpuinfo_hz(amd), Some(2.25e9));
        assert_eq!(parse_cpuinfo_hz("nothing here"), None);
    }

    #[test]
    fn counters_and_early_finish() {
        let counters = QueueCounters::new(2);
        counters.add(1, 10);
        counters.add(1, 5);
        assert_eq!(counters.snapshot(), vec![0, 15]);
        let t0 = Instant::now();
        let offsets = [Duration::ZERO, Duration::from_secs(30)];
        let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
        let mut intervals = Vec::new();
        let window = sample_window(t0, offsets, &src, &|| true, &mut keep(&mut intervals));
        assert!(!window.complete, "finished workers cut the window short");
        assert!(window.first.is_some() && window.last.is_some(), "first boundary sampled, plus a final sample");
        assert_eq!(intervals.len(), 1, "the early end closes one interval");
    }

    #[test]
    fn a_long_window_keeps_two_samples_and_streams_the_rest() {
        let counters = QueueCounters::new(1);
        let offsets = (0..200).map(|n| Duration::from_micros(n * 100));
        let src = SampleSources { counters: &counters, tids: &[], sockets: &[], iface: None, udp: &[] };
        let mut seen = 0usize;
        let mut ends = Vec::new();
        let window = sample_window(Instant::now(), offsets, &src, &|| false, &mut |iv| {
            seen += 1;
            ends.push(iv.end);
        });
        assert!(window.complete);
        assert_eq!(seen, 199, "one interval per pair of consecutive samples, each handed over once");
        assert!(ends.windows(2).all(|w| w[0] <= w[1]), "intervals arrive in order");
    }
}
