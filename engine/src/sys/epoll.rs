//! A minimal epoll: level-triggered readiness of many non-blocking descriptors on one thread,
//! so thousands of idle connections cost descriptors, not threads.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct Epoll(OwnedFd);

/// One ready descriptor: the token it was added with, and whether it hung up or failed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready {
    pub token: u64,
    pub hangup: bool,
}

impl Epoll {
    pub(crate) fn new() -> std::io::Result<Self> {
        // SAFETY: epoll_create1 has no memory preconditions; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor this function owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for input (and hang-up) under `token`.
    pub(crate) fn add(&self, fd: RawFd, token: u64) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32, u64: token };
        // SAFETY: a valid epoll descriptor and event struct for the duration of the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd` (closing it does too; this is for descriptors that stay open).
    pub(crate) fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; a descriptor not watched only gets ENOENT back.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout_ms` and appends what is ready to `out`.
    pub(crate) fn wait(&self, out: &mut Vec<Ready>, timeout_ms: i32) -> std::io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
        // SAFETY: the buffer holds `events.len()` entries and outlives the call.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, timeout_ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
        }
        let hup = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
        out.extend(events[..n as usize].iter().map(|e| Ready { token: e.u64, hangup: e.events & hup != 0 }));
        Ok(())
    }
}
