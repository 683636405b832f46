//! io_uring set-up, waiting, and the provided-buffer ring.
//!
//! Every queue thread owns one ring built here: single issuer with deferred task work where
//! the kernel has it (completions are then processed only when the owner asks, with no
//! cross-CPU task-work interrupts), and one way of waiting that honours the thread's
//! [`WaitMode`].

use crate::base::error::{Error, Result};
use io_uring::types::{BufRingEntry, SubmitArgs, Timespec};
use io_uring::IoUring;
use serde::{Deserialize, Serialize};
use std::io;
use std::time::{Duration, Instant};

/// How a worker waits for completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Never sleep: poll the completion queue in a loop.
    Spin,
    /// Poll for `spin_us` after the last completion, then sleep in the kernel.
    Adaptive { spin_us: u32 },
    /// Sleep in the kernel until a completion arrives.
    Sleep,
}

impl WaitMode {
    pub fn describe(&self) -> String {
        match self {
            WaitMode::Spin => "busy-poll (spin)".into(),
            WaitMode::Adaptive { spin_us } => {
                format!("adaptive busy-poll (spin {spin_us} us, then sleep)")
            }
            WaitMode::Sleep => "sleep-wait".into(),
        }
    }
    /// How long to keep polling after the last completion before sleeping.
    pub(crate) fn spin_window(&self) -> Option<Duration> {
        match self {
            WaitMode::Spin => None,
            WaitMode::Adaptive { spin_us } => Some(Duration::from_micros(u64::from(*spin_us))),
            WaitMode::Sleep => Some(Duration::ZERO),
        }
    }
}

/// io_uring SQPOLL: a kernel thread polls the submission queue, so sends and re-arms need
/// no system call while it is awake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqPoll {
    /// How long the kernel thread spins idle before it sleeps, milliseconds.
    pub idle_ms: u32,
}

/// io_uring NAPI busy polling (Linux 6.9): waiting on a ring busy-polls the NIC queues of
/// the sockets it serves instead of waiting for their interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NapiPoll {
    pub busy_poll_us: u32,
    pub prefer_busy_poll: bool,
}

/// The fast paths a queue thread's ring is built with: chosen and probed once by the front
/// end ([`crate::uring::fastpath::FastPaths`]), then carried by value in every loop's
/// configuration. The default is a plain ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingPaths {
    pub sqpoll: Option<SqPoll>,
    pub napi: Option<NapiPoll>,
}

/// Builds a ring for one queue thread; falls back to a plain ring on kernels without
/// DEFER_TASKRUN (6.1). TASKRUN_FLAG makes the kernel raise `IORING_SQ_TASKRUN` in shared
/// memory when deferred work waits, so a spinning thread can see it without a syscall.
/// With `paths.sqpoll` a kernel thread submits (DEFER_TASKRUN cannot be combined with it),
/// with `paths.napi` waits busy-poll.
pub(crate) fn build_ring(entries: u32, paths: RingPaths) -> Result<IoUring> {
    let ring = if let Some(sq) = paths.sqpoll {
        IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder()
            .setup_sqpoll(sq.idle_ms)
            .setup_cqsize(entries * 4)
            .build(entries)
    } else {
        IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(entries * 4)
            .build(entries)
            .or_else(|_| {
                IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder()
                    .setup_cqsize(entries * 4)
                    .build(entries)
            })
    }
    .map_err(|e| Error::io("creating an io_uring for a queue thread", e))?;
    if let Some(napi) = paths.napi {
        register_napi(&ring, napi)?;
    }
    Ok(ring)
}

/// Registers NAPI busy polling on `ring`.
pub(crate) fn register_napi<S: io_uring::squeue::EntryMarker, C: io_uring::cqueue::EntryMarker>(
    ring: &IoUring<S, C>,
    n: NapiPoll,
) -> Result<()> {
    let mut napi =
        io_uring::types::Napi::new().set_busy_poll_timeout(n.busy_poll_us).set_prefer_busy_poll(n.prefer_busy_poll);
    ring.submitter().register_napi(&mut napi).map_err(|e| {
        Error::unsupported(format!(
            "--napi: registering io_uring NAPI busy polling failed ({e}); it needs Linux 6.9 or newer"
        ))
    })
}

/// How many completions a sleeping thread waits for before it is woken, and for how long
/// at most it holds out for them. Waking once per several completions is what keeps a
/// sleeping stream thread cheap; the bound keeps latency in check.
#[derive(Debug, Clone, Copy)]
pub struct WakeBatch {
    pub want: u32,
    pub max_delay_us: u32,
}

/// How a wait for completions ended: by polling the ring (a look at shared memory, or the
/// spin of a busy-polling thread), or after sleeping in the kernel until a wake-up (an
/// interrupt's softirq completing the receive, or the time limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    Polled,
    Slept,
}

/// Waits for completions the way the thread's mode asks, never past `limit` from now.
/// `last_activity` is when the thread last saw a completion (for adaptive spinning).
pub(crate) fn wait_for_completions<C: io_uring::cqueue::EntryMarker>(
    ring: &mut IoUring<io_uring::squeue::Entry, C>,
    mode: WaitMode,
    last_activity: Instant,
    limit: Duration,
    batch: WakeBatch,
) -> Result<Waited> {
    if poll_once(ring)? {
        return Ok(Waited::Polled);
    }
    let spin_until = match mode.spin_window() {
        None => Instant::now() + limit,
        Some(window) => last_activity + window,
    };
    while Instant::now() < spin_until {
        if poll_once(ring)? {
            return Ok(Waited::Polled);
        }
        std::hint::spin_loop();
    }
    if mode == WaitMode::Spin {
        return Ok(Waited::Polled);
    }
    let ts = Timespec::from(limit);
    // Batched wake-ups need IORING_FEAT_MIN_TIMEOUT (6.12): without the bound, waiting for
    // several completions could stall a flow that only has one in flight.
    let batched = batch.want > 1 && ring.params().is_feature_min_timeout();
    let (want, args) = if batched {
        (batch.want as usize, SubmitArgs::new().timespec(&ts).min_wait_usec(batch.max_delay_us))
    } else {
        (1, SubmitArgs::new().timespec(&ts))
    };
    match ring.submitter().submit_with_args(want, &args) {
        Ok(_) => Ok(Waited::Slept),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {
            Ok(Waited::Slept)
        }
        Err(e) => Err(Error::io("waiting on io_uring", e)),
    }
}

/// One non-blocking look: enters the kernel only when entries are queued or deferred task
/// work is flagged (then the crate passes GETEVENTS, which runs it), else reads shared
/// memory only. Returns whether completions are ready.
fn poll_once<C: io_uring::cqueue::EntryMarker>(ring: &mut IoUring<io_uring::squeue::Entry, C>) -> Result<bool> {
    let (queued, taskrun) = {
        let sq = ring.submission();
        (!sq.is_empty(), sq.taskrun())
    };
    if queued || taskrun {
        submit_now(ring)?;
    }
    Ok(!ring.completion().is_empty())
}

/// `user_data` of the request [`cancel_all`] submits; loops must not use it.
pub(crate) const CANCEL_ALL_TAG: u64 = u64::MAX;

/// Cancels every operation still in flight on `ring` and reaps completions until all
/// `inflight` of them have ended (or `limit` has passed), so the buffers they point at can be
/// freed. Loops whose operations never end on their own (a receive on a datagram socket, a
/// connect to a silent host, a multishot accept) call it before they return. Every reaped
/// completion is shown to `on_cqe` (user_data, result, flags) first, so that a descriptor
/// an accept delivered meanwhile can be closed; one flagged `IORING_CQE_F_MORE` does not end
/// its operation.
pub(crate) fn cancel_all(
    ring: &mut IoUring,
    mut inflight: usize,
    limit: Duration,
    mut on_cqe: impl FnMut(u64, i32, u32),
) -> Result<()> {
    if inflight == 0 {
        return Ok(());
    }
    let cancel = io_uring::opcode::AsyncCancel2::new(io_uring::types::CancelBuilder::any()).build();
    // SAFETY: a cancel points at no memory.
    unsafe { push(ring, &cancel.user_data(CANCEL_ALL_TAG)) }?;
    let end = Instant::now() + limit;
    while inflight > 0 && Instant::now() < end {
        let ts = Timespec::from(Duration::from_millis(10));
        match ring.submitter().submit_with_args(1, &SubmitArgs::new().timespec(&ts)) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => return Err(Error::io("cancelling io_uring operations", e)),
        }
        for c in ring.completion() {
            if c.user_data() == CANCEL_ALL_TAG {
                continue;
            }
            on_cqe(c.user_data(), c.result(), c.flags());
            if !io_uring::cqueue::more(c.flags()) {
                inflight = inflight.saturating_sub(1);
            }
        }
    }
    Ok(())
}

/// Submits queued entries without waiting.
pub(crate) fn submit_now<C: io_uring::cqueue::EntryMarker>(
    ring: &mut IoUring<io_uring::squeue::Entry, C>,
) -> Result<()> {
    match ring.submit() {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)) => Ok(()),
        Err(e) => Err(Error::io("submitting to io_uring", e)),
    }
}

/// Pushes an entry, submitting first when the submission queue is full.
///
/// # Safety
///
/// The kernel reads and writes what `entry` points at (buffers, iovecs, msghdrs, file
/// descriptors) until the operation completes or is cancelled and reaped, after this call
/// returns. The caller keeps every one of them valid and unmoved, and does not touch a buffer
/// the kernel writes into, until then: in practice, they belong to the same struct as the ring
/// and are declared after it, so they drop after it.
pub unsafe fn push<C: io_uring::cqueue::EntryMarker>(
    ring: &mut IoUring<io_uring::squeue::Entry, C>,
    entry: &io_uring::squeue::Entry,
) -> Result<()> {
    loop {
        // SAFETY: the caller's contract above (what the entry points at outlives the operation).
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        submit_now(ring)?;
    }
}

/// Heap memory with page alignment (buffer rings must be page aligned; payload buffers
/// benefit from it).
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> Result<Self> {
        let len = len.max(1).next_multiple_of(4096);
        // SAFETY: anonymous private mapping, no file; checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io(format!("allocating {len} bytes of buffer memory"), io::Error::last_os_error()));
        }
        Ok(Self { ptr: ptr.cast(), len })
    }
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from our own successful mmap.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// SAFETY: AlignedBuf owns its mapping exclusively; moving it between threads is fine.
unsafe impl Send for AlignedBuf {}

/// A provided-buffer ring: `count` buffers of `size` bytes the kernel picks from for
/// multishot receives. Recycling a buffer is only a ring entry write and a tail bump: no copy,
/// no syscall. The TCP receiver never reads the payload; the UDP receiver reads each buffer
/// ([`BufRing::buffer`]) before giving it back.
pub(crate) struct BufRing {
    ring: AlignedBuf,
    data: AlignedBuf,
    count: u16,
    size: u32,
    tail: u16,
}

impl BufRing {
    /// Creates the ring and registers it with `ring` as buffer group `group`.
    pub(crate) fn register(uring: &IoUring, group: u16, count: u16, size: u32) -> Result<Self> {
        if !count.is_power_of_two() {
            return Err(Error::usage(format!("buffer ring size {count} must be a power of two")));
        }
        let ring = AlignedBuf::new(count as usize * std::mem::size_of::<BufRingEntry>())?;
        let data = AlignedBuf::new(count as usize * size as usize)?;
        let mut this = Self { ring, data, count, size, tail: 0 };
        for bid in 0..count {
            this.provide(bid);
        }
        this.publish();
        // SAFETY: the ring memory is page aligned, holds `count` entries, and lives as long as
        // `this`; the owner drops the io_uring before the BufRing.
        unsafe { uring.submitter().register_buf_ring_with_flags(this.ring.as_ptr() as u64, count, group, 0) }
            .map_err(|e| Error::io(format!("registering a buffer ring of {count} x {size} bytes"), e))?;
        Ok(this)
    }

    fn entries(&self) -> *mut BufRingEntry {
        self.ring.as_ptr().cast()
    }

    /// Writes buffer `bid` at the current tail slot (not yet visible to the kernel).
    fn provide(&mut self, bid: u16) {
        let slot = (self.tail & (self.count - 1)) as usize;
        // SAFETY: slot < count entries in our mapping; the kernel only reads slots before the
        // published tail, and this one is past it.
        unsafe {
            let entry = &mut *self.entries().add(slot);
            entry.set_addr(self.data.as_ptr().add(bid as usize * self.size as usize) as u64);
            entry.set_len(self.size);
            entry.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes provided buffers visible to the kernel (release store of the tail).
    fn publish(&mut self) {
        // SAFETY: the tail field lives inside the first entry of our mapping; the kernel reads
        // it with acquire semantics.
        unsafe {
            let tail = BufRingEntry::tail(self.entries()) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    /// Gives back the buffers a completion of `bytes` bytes used, starting at buffer `first`.
    /// A bundle fills consecutive buffers, each completely before the next.
    pub(crate) fn recycle(&mut self, first: u16, bytes: u32) {
        let used = bytes.div_ceil(self.size).max(1);
        for i in 0..used {
            let bid = ((u32::from(first) + i) % u32::from(self.count)) as u16;
            self.provide(bid);
        }
        self.publish();
    }

    /// The first `len` bytes of buffer `bid`, as the kernel filled them. Valid until the
    /// buffer is recycled.
    pub(crate) fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        let bid = (bid % self.count) as usize;
        let len = len.min(self.size as usize);
        // SAFETY: bid < count and len <= size keep the slice inside our mapping; the kernel
        // handed this buffer over with its completion and does not write it until recycled.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(bid * self.size as usize), len) }
    }

    /// Bytes of pinned memory the ring needs (entries only: payload buffers are not pinned).
    pub(crate) fn pinned_bytes(count: u16) -> u64 {
        (count as u64 * std::mem::size_of::<BufRingEntry>() as u64).next_multiple_of(4096)
    }
}
