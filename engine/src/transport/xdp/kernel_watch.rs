//! The receiving thread of `recv --engine xdp --xdp-count kernel`: the XDP program accounts
//! every test datagram itself ([`crate::sys::xdp::kernel_count`]); this thread only reads the
//! flows' trackers every [`POLL`], publishes them for the interval sampler, adds the new bytes
//! to the queue counters and tells the session which flows have seen their FIN and when
//! datagrams last arrived, exactly as the socket threads do ([`super::recv`]).

use crate::metrics::measure::QueueCounters;
use crate::metrics::seq::SeqStats;
use crate::sys::xdp::kernel_count::{self, KernelFlowCounts};
use crate::transport::xdp::recv::{XdpRecvConfig, XdpRecvFlow, XdpRecvResult};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often the trackers are read.
const POLL: Duration = Duration::from_millis(10);

/// A flow's figures from its kernel tracker, with the user-space tracker's meaning.
pub(crate) fn seq_stats(c: &KernelFlowCounts) -> SeqStats {
    let expected = c.highest.max(c.fin_seq.saturating_sub(1));
    SeqStats {
        received: c.received,
        lost: expected.saturating_sub(c.received),
        out_of_order: c.out_of_order,
        duplicates: c.duplicates,
        too_old: c.too_old,
        expected,
        bytes: c.bytes,
        jitter_us: c.jitter16_us as f64 / 16.0,
        fin: c.fin_seq != 0,
        delay: None,
    }
}

/// Watches the trackers in map `kflows` until the halt flag (raised after the program is
/// detached), then reads them a last time.
pub(crate) fn run(
    kflows: RawFd,
    flows: &[XdpRecvFlow],
    counters: &QueueCounters,
    cfg: &XdpRecvConfig,
) -> XdpRecvResult {
    let mut result = XdpRecvResult { notes: vec![note()], ..XdpRecvResult::default() };
    let mut bytes = vec![0u64; flows.len()];
    let mut arrived = 0u64;
    loop {
        let last = cfg.halt.load(Ordering::Relaxed);
        let counts = match kernel_count::read(kflows) {
            Ok(c) => c,
            Err(e) => {
                result.notes.push(e.to_string());
                break;
            }
        };
        let stats: Vec<SeqStats> = counts.iter().map(seq_stats).collect();
        for (i, (flow, s)) in flows.iter().zip(&stats).enumerate() {
            counters.add(flow.queue as usize, s.bytes - bytes[i]);
            bytes[i] = s.bytes;
            if s.fin {
                cfg.fins[i].store(true, Ordering::Relaxed);
            }
            if let Some(live) = &flow.live {
                *live.lock().unwrap_or_else(|p| p.into_inner()) = *s;
            }
        }
        let now_arrived: u64 = counts.iter().map(|c| c.received + c.duplicates).sum();
        if now_arrived != arrived {
            arrived = now_arrived;
            cfg.activity.store(Instant::now().duration_since(cfg.epoch).as_nanos() as u64, Ordering::Relaxed);
        }
        result.frames = now_arrived;
        result.strangers = counts.iter().map(|c| c.strangers).sum();
        result.foreign = counts.iter().map(|c| c.foreign).sum();
        result.flows = stats;
        if last {
            break;
        }
        std::thread::sleep(POLL);
    }
    result.flows.resize(flows.len(), SeqStats::default());
    result
}

fn note() -> String {
    "counted in the kernel: the XDP program tracks each flow's sequence numbers and drops the frames (no socket; UDP checksums not verified)".into()
}
