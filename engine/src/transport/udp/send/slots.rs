//! The send slots of a UDP sending thread: each a payload buffer with its `msghdr`, `iovec`
//! and `UDP_SEGMENT` cmsg, allocated once and lent to the kernel for one send at a time.

use super::UdpSendConfig;
use crate::base::error::Result;
use crate::uring::ring::AlignedBuf;
use crate::wire::udp_payload::{DatagramHeader, WireTime, FIRST_SEQ};
use io_uring::IoUring;

/// Room for one `cmsghdr` carrying a u16 (`CMSG_SPACE(2)` is 24 on 64-bit Linux).
const CMSG_SPACE_U16: usize = 32;

/// One send in flight: its payload buffer and the `msghdr` that points into it. The kernel
/// may read all of it until the completion arrives, so slots live in one boxed slice that is
/// never resized, and are reused only after their completion.
pub(super) struct Slot {
    pub(super) buf: AlignedBuf,
    pub(super) iov: libc::iovec,
    pub(super) msg: libc::msghdr,
    cmsg: [u64; CMSG_SPACE_U16 / 8],
    pub(super) flow: usize,
    pub(super) first_seq: u64,
    pub(super) count: u32,
}

// Field order is drop order: the ring goes first, before the slot memory it may still read.
pub(super) struct SendRing {
    pub(super) ring: IoUring,
    pub(super) slots: Box<[Slot]>,
}

/// Allocates `nslots` send slots of `slot_bytes` for datagrams of `cfg.len` bytes, `per_flow`
/// to a flow: each slot's msghdr points at its own buffer and carries the `UDP_SEGMENT` cmsg,
/// and every datagram place in the buffer has its header written once.
pub(super) fn new_slots(
    nslots: usize,
    per_flow: usize,
    slot_bytes: usize,
    cfg: &UdpSendConfig,
    header: DatagramHeader,
) -> Result<Box<[Slot]>> {
    let len = cfg.len as usize;
    let mut slots = Vec::with_capacity(nslots);
    for i in 0..nslots {
        let buf = AlignedBuf::new(slot_bytes)?;
        // SAFETY: a fresh mapping of at least slot_bytes; filler after each header.
        unsafe { std::ptr::write_bytes(buf.as_ptr(), 0, buf.len()) };
        // SAFETY: msghdr and iovec are plain C structs for which all-zero is valid.
        let (iov, msg) = unsafe { (std::mem::zeroed::<libc::iovec>(), std::mem::zeroed::<libc::msghdr>()) };
        slots.push(Slot { buf, iov, msg, cmsg: [0; CMSG_SPACE_U16 / 8], flow: i / per_flow, first_seq: 0, count: 0 });
    }
    let mut slots = slots.into_boxed_slice();
    for slot in slots.iter_mut() {
        // Pointers into the slot itself: valid because the boxed slice never moves or resizes.
        slot.iov.iov_base = slot.buf.as_ptr().cast();
        slot.msg.msg_iov = &mut slot.iov;
        slot.msg.msg_iovlen = 1;
        slot.msg.msg_control = slot.cmsg.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure size computations; CMSG_FIRSTHDR reads the
        // msghdr we just filled, whose control buffer (32 bytes, 8-aligned) holds one cmsghdr
        // with a u16 (CMSG_SPACE(2) = 24 bytes), written in bounds below.
        unsafe {
            slot.msg.msg_controllen = libc::CMSG_SPACE(2) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&slot.msg);
            (*cmsg).cmsg_level = libc::SOL_UDP;
            (*cmsg).cmsg_type = libc::UDP_SEGMENT;
            (*cmsg).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), cfg.len as u16);
        }
        for off in (0..slot.buf.len().saturating_sub(len - 1)).step_by(len) {
            // SAFETY: off + len <= buf.len() by the range above; we own the mapping.
            let datagram = unsafe { std::slice::from_raw_parts_mut(slot.buf.as_ptr().add(off), len) };
            // The flags word stays; seq and time are rewritten per send. Seq 1 cannot fail.
            let _ = header.encode(datagram, FIRST_SEQ, WireTime::default());
        }
    }
    Ok(slots)
}
