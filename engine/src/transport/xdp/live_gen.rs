//! The live-frames sending thread (`send --engine xdp --gen live`): drives the generator
//! program ([`LiveFrames`]) with `BPF_PROG_RUN` calls, one sending slot per queue, until the
//! deadline or a halt, then has it write each flow's FINs.
//!
//! The program numbers and stamps every frame itself, so the thread only decides how many
//! frames each call makes: unpaced, a chunk sized to last about [`CALL_TIME`], or what the
//! pacer allows at a rate (at most [`CHUNK`]). Each call has a fixed cost in the kernel: it
//! swaps the program into the XDP dispatcher and out again, each with an IPI to every CPU and
//! an RCU grace period (milliseconds, spent asleep). At 8192 frames a call that capped the
//! generator near 0.33 M frames/s with its core mostly idle. Calls of about 100 ms reached
//! 3.1 M frames/s with the core 67% busy; about 250 ms, 4.3 M at 88% (docs/performance.md,
//! set H). A halt is still seen within a call. The figures are read back from the program's
//! flow table at the end (the next sequence number of each flow), so they are exact whatever
//! a call did; the live byte counters advance by each call's frames.

use crate::metrics::measure::QueueCounters;
use crate::sys::xdp::live_frames::{LiveFrames, SlotInput};
use crate::transport::pace::Pacer;
use crate::transport::stopping::Stopping;
use crate::transport::xdp::send::XdpFlowSent;
use crate::wire::udp_payload::FIRST_SEQ;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames of the first unpaced call.
const CHUNK: u32 = 8192;
/// Bounds of the unpaced calls' size.
const CHUNK_MIN: u32 = CHUNK;
const CHUNK_MAX: u32 = 1 << 22;
/// How long an unpaced call should last: the chunk doubles while calls are shorter than half
/// of it and halves while they are longer than twice it.
const CALL_TIME: Duration = Duration::from_millis(250);

/// One queue's sending slot: its flows (`first_flow..first_flow + flows` in the program's
/// table, all counted under test queue `queue`) and its run input.
pub(crate) struct LiveSlot {
    pub slot: u32,
    pub queue: u32,
    pub first_flow: u32,
    pub flows: u32,
    pub(crate) input: SlotInput,
}

/// How a live-frames thread runs.
#[derive(Debug, Clone)]
pub(crate) struct LiveGenConfig {
    /// UDP payload bytes per datagram.
    pub len: u32,
    pub deadline: Instant,
    /// Raised to stop before the deadline: the FINs follow at once.
    pub halt: Option<Arc<AtomicBool>>,
    /// This thread's share of the offered rate in payload bits/s; 0 = unlimited.
    pub rate_bps: u64,
    /// Frames back to back before the rate is checked (`-b RATE/N`); 0: none.
    pub burst: u32,
    /// Frames per transmit flush inside one call (`batch_size`).
    pub batch: u32,
    pub fin_copies: u32,
    pub fin_interval: Duration,
    /// Spin instead of sleeping while paced (a CPU of its own).
    pub spin: bool,
}

/// What one live-frames thread did.
#[derive(Debug, Clone, Default)]
pub(crate) struct LiveGenResult {
    /// Per flow of the thread's slots, in slot and flow order.
    pub flows: Vec<XdpFlowSent>,
    /// Frames the program was run on (data and FINs).
    pub frames: u64,
    /// `BPF_PROG_RUN` calls.
    pub calls: u64,
    pub notes: Vec<String>,
}

/// Runs one slot for `repeat` frames; a signal cuts a call short (`EINTR`), which is not an
/// error: the loop looks at its stop conditions next.
fn run_slot(gen: &LiveFrames, slot: &LiveSlot, repeat: u32, batch: u32) -> Result<bool, String> {
    match gen.run(&slot.input, repeat, batch.min(repeat)) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(false),
        Err(e) => Err(format!("BPF_PROG_RUN of the XDP generator on queue {} failed: {e}", slot.slot)),
    }
}

/// Runs the thread's slots until the deadline or a halt, then the FINs; reads each flow's
/// count back from the program.
pub(crate) fn run(
    gen: &LiveFrames,
    slots: Vec<LiveSlot>,
    counters: &QueueCounters,
    cfg: &LiveGenConfig,
) -> LiveGenResult {
    let mut result = LiveGenResult::default();
    let mut error = None;
    let mut pacer = Pacer::new(cfg.rate_bps, Instant::now()).in_bursts(cfg.burst, cfg.len);
    let mut stopping = Stopping::new(cfg.deadline, cfg.halt.clone(), Duration::ZERO);
    let mut next = 0;
    let mut chunk = CHUNK;
    while !slots.is_empty() && error.is_none() {
        let now = Instant::now();
        if stopping.check(now) {
            break;
        }
        let frames = match pacer.budget(now, u64::from(cfg.len), u64::from(chunk)) {
            Ok(n) => n as u32,
            Err(wait) => {
                if cfg.spin {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(wait.min(stopping.wait_limit(now, Some(wait))));
                }
                continue;
            }
        };
        let slot = &slots[next];
        next = (next + 1) % slots.len();
        result.calls += 1;
        match run_slot(gen, slot, frames, cfg.batch) {
            Ok(true) => {
                // Paced calls keep the first size: a chunk is also the largest burst after
                // a stall, and a receiver's ring takes only so many at once.
                if cfg.rate_bps == 0 && frames == chunk {
                    chunk = next_chunk(chunk, now.elapsed());
                }
                result.frames += u64::from(frames);
                pacer.issue(u64::from(frames) * u64::from(cfg.len));
                counters.add(slot.queue as usize, u64::from(frames) * u64::from(cfg.len));
            }
            Ok(false) => {}
            Err(e) => error = Some(e),
        }
    }
    if error.is_none() {
        error = send_fins(gen, &slots, cfg, &mut result).err();
    }
    for slot in &slots {
        for flow in slot.first_flow..slot.first_flow + slot.flows {
            let next_seq = gen.next_seq(flow).map_err(|e| e.to_string());
            let sent = next_seq.as_ref().map_or(0, |n| n.saturating_sub(FIRST_SEQ));
            result.flows.push(XdpFlowSent {
                queue: slot.queue,
                datagrams: sent,
                bytes: sent * u64::from(cfg.len),
                fin_seq: *next_seq.as_ref().unwrap_or(&0),
                error: error.clone().or(next_seq.err()),
            });
        }
    }
    result.notes.extend(error);
    result
}

/// The size of the next unpaced call after one of `chunk` frames took `took`.
fn next_chunk(chunk: u32, took: Duration) -> u32 {
    if took < CALL_TIME / 2 {
        (chunk * 2).min(CHUNK_MAX)
    } else if took > CALL_TIME * 2 {
        (chunk / 2).max(CHUNK_MIN)
    } else {
        chunk
    }
}

/// The FINs: after a pause that lets the last data frames through, `fin_copies` rounds of one
/// FIN per flow of each slot.
fn send_fins(
    gen: &LiveFrames,
    slots: &[LiveSlot],
    cfg: &LiveGenConfig,
    result: &mut LiveGenResult,
) -> Result<(), String> {
    std::thread::sleep(cfg.fin_interval);
    for slot in slots {
        gen.finish_slot(slot.slot).map_err(|e| e.to_string())?;
    }
    for copy in 0..cfg.fin_copies {
        for slot in slots {
            // A signal may cut the round short: run it again (FIN copies are idempotent).
            let mut tries = 0;
            while !run_slot(gen, slot, slot.flows, cfg.batch)? && tries < 3 {
                tries += 1;
            }
            result.calls += 1;
            result.frames += u64::from(slot.flows);
        }
        if copy + 1 < cfg.fin_copies {
            std::thread::sleep(cfg.fin_interval);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_follows_the_call_time() {
        assert_eq!(next_chunk(8192, Duration::from_millis(10)), 16384);
        assert_eq!(next_chunk(16384, Duration::from_millis(250)), 16384);
        assert_eq!(next_chunk(16384, Duration::from_millis(600)), 8192);
        assert_eq!(next_chunk(CHUNK_MAX, Duration::ZERO), CHUNK_MAX);
        assert_eq!(next_chunk(CHUNK_MIN, Duration::from_secs(1)), CHUNK_MIN);
    }
}
