//! Stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) taken by one thread with sigwait instead of a
//! handler: blocked in every thread, so no data-path thread is ever interrupted, and the thread
//! that takes them runs ordinary code (stop a token, revert settings with tc and ethtool).
//! What a signal means is the caller's policy (the CLI maps them onto a stop token).

use crate::base::error::{Error, Result};

/// The stop signals, blocked in the thread that made this value and every thread it spawns
/// after; [`StopSignals::wait`] takes them one at a time.
pub struct StopSignals {
    set: libc::sigset_t,
}

/// One stop signal taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal {
    pub number: i32,
    /// `SIGINT`, `SIGTERM`, `SIGHUP` or `SIGQUIT`, as reports and logs show it.
    pub name: &'static str,
}

impl StopSignals {
    /// Blocks SIGINT, SIGTERM, SIGQUIT (Ctrl-\\, a stop like Ctrl-C rather than a core dump
    /// that loses the report) and SIGHUP (only when not ignored, as under nohup) in the
    /// calling thread. Call it before any other thread exists, so that every thread inherits
    /// the mask. SIGINT and SIGTERM get their default action back (a shell ignores SIGINT for
    /// a background job) so that they reach [`wait`](Self::wait) instead of vanishing; blocked,
    /// the default action never runs.
    pub fn block() -> Result<Self> {
        // SAFETY: a zeroed sigaction is a valid out-parameter; a null new action only reads.
        let hup_ignored = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
        };
        // SAFETY: a zeroed sigset_t is valid input for sigemptyset, which initialises it; the
        // signal numbers are valid, and SIG_DFL is a valid disposition for both.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGQUIT);
            if !hup_ignored {
                libc::sigaddset(&mut set, libc::SIGHUP);
            }
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            set
        };
        // SAFETY: `set` is initialised; the old mask is not needed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(Error::io("blocking the stop signals", std::io::Error::from_raw_os_error(rc)));
        }
        Ok(Self { set })
    }

    /// Waits for the next stop signal (`None` if sigwait fails, which it does not for a valid
    /// set).
    pub fn wait(&self) -> Option<StopSignal> {
        let mut number: libc::c_int = 0;
        // SAFETY: `self.set` is initialised and `number` is a valid out-parameter.
        if unsafe { libc::sigwait(&self.set, &mut number) } != 0 {
            return None;
        }
        let name = match number {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            libc::SIGQUIT => "SIGQUIT",
            _ => "a signal",
        };
        Some(StopSignal { number, name })
    }
}
