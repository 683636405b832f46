//! The receiving queue thread with zero-copy receive (`recv --zc-rx`): one multishot
//! `RECV_ZC` per flow on a ring bound to one NIC receive queue ([`crate::uring::zcrx`]).
//!
//! The NIC writes payload into the registered area; each completion says where (32-byte
//! CQE) and how much. The payload is counted, never read, and each piece goes straight back
//! to the NIC through the refill ring, published once per batch of completions. Like the
//! copying receiver, a multishot request that ends without error or EOF is re-armed.

use crate::base::error::Result;
use crate::metrics::measure::QueueCounters;
use crate::transport::tcp::recv::{RecvFlow, RecvWorkerConfig, RecvWorkerResult};
use crate::transport::{errno_text, FlowOutcome};
use crate::uring::ring::{push, wait_for_completions, Waited};
use crate::uring::zcrx::ZcRx;
use crate::uring::zcrx::{explain, ZcrxRing};
use io_uring::{cqueue, opcode, types};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn arm(zr: &mut ZcrxRing, fd: i32, idx: usize) -> Result<()> {
    let entry = opcode::RecvZc::new(types::Fd(fd), 0).ifq(zr.ifq_id).build();
    // SAFETY: the kernel writes into the registered area of zr, which drops after zr.ring
    // (ZcrxRing's field order); fd stays open until the flow's completions end.
    unsafe { push(&mut zr.ring, &entry.user_data(idx as u64)) }
}

/// Runs until every flow reached EOF or failed, or `cfg.halt` is raised. `rxq` is the NIC
/// receive queue this thread's flows are steered to.
pub fn run(
    flows: Vec<RecvFlow>,
    counters: &QueueCounters,
    cfg: &RecvWorkerConfig,
    zc: &ZcRx,
    rxq: u32,
) -> Result<RecvWorkerResult> {
    let entries = (flows.len() as u32 * 2).next_power_of_two().clamp(64, 4096);
    let mut zr = ZcrxRing::register(zc.ifindex, rxq, entries).map_err(|e| explain(zc, rxq, &e))?;
    let mut bytes = vec![0u64; flows.len()];
    let mut errors: Vec<Option<String>> = vec![None; flows.len()];
    let mut open: Vec<bool> = vec![true; flows.len()];
    for (idx, flow) in flows.iter().enumerate() {
        arm(&mut zr, flow.stream.as_raw_fd(), idx)?;
    }
    let mut result = RecvWorkerResult::default();
    let mut remaining = flows.len();
    let mut last_activity = Instant::now();
    let mut cqes: Vec<(u64, i32, u32, u64)> = Vec::with_capacity(entries as usize * 4);
    while remaining > 0 && !cfg.halt.load(Ordering::Relaxed) {
        let waited =
            wait_for_completions(&mut zr.ring, cfg.wait, last_activity, Duration::from_millis(100), cfg.batch)?;
        cqes.clear();
        cqes.extend(zr.ring.completion().map(|c| (c.user_data(), c.result(), c.flags(), c.big_cqe()[0])));
        if cqes.is_empty() {
            continue;
        }
        if waited == Waited::Polled {
            result.polled_completions += cqes.len() as u64;
        }
        last_activity = Instant::now();
        for &(ud, res, flags, off) in &cqes {
            let idx = ud as usize;
            result.completions += 1;
            if res > 0 {
                bytes[idx] += res as u64;
                counters.add(flows[idx].queue as usize, res as u64);
                zr.refill(off, res as u32);
                if !cqueue::more(flags) {
                    result.rearms += 1;
                    arm(&mut zr, flows[idx].stream.as_raw_fd(), idx)?;
                }
            } else if res == 0 || res == -libc::EINTR || res == -libc::EAGAIN || res == -libc::ENOMEM {
                // EOF ends the flow; a transient end (or an area briefly out of free pieces,
                // ENOMEM) re-arms it.
                if res == 0 && !cqueue::more(flags) {
                    if open[idx] {
                        open[idx] = false;
                        remaining -= 1;
                    }
                } else if !cqueue::more(flags) {
                    result.rearms += 1;
                    arm(&mut zr, flows[idx].stream.as_raw_fd(), idx)?;
                }
            } else if open[idx] {
                errors[idx] = Some(format!("zero-copy receive failed: {}", errno_text(res)));
                open[idx] = false;
                remaining -= 1;
            }
        }
        zr.publish();
    }
    for (idx, e) in errors.iter_mut().enumerate() {
        if open[idx] {
            *e = Some("flow still open when the receiver stopped waiting (sender stalled or vanished)".into());
        }
    }
    result.flows = flows
        .iter()
        .zip(bytes)
        .zip(errors)
        .map(|((f, bytes), error)| FlowOutcome { queue: f.queue, bytes, error })
        .collect();
    drop(zr);
    Ok(result)
}
