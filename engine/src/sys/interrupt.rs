//! Ctrl-C and SIGTERM: the first signal asks the running test to end early and cleanly (the
//! far side is told, both sides report what they measured); a second one exits at once.
//!
//! The handler only stores the signal number in an atomic (async-signal-safe); samplers and
//! server loops poll [`requested`], so no data-path thread ever sees a signal.

use std::sync::atomic::{AtomicI32, Ordering};

/// The first signal received, 0 while none.
static FIRST: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signo: libc::c_int) {
    if FIRST.compare_exchange(0, signo, Ordering::SeqCst, Ordering::SeqCst).is_err() {
        // The second signal: the user does not want to wait for the partial report.
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(128 + signo) };
    }
}

/// Installs the handler for SIGINT and SIGTERM. Call once, before the test starts.
pub fn install() {
    for signo in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask; the handler
        // touches only an atomic and _exit. No SA_RESTART: a blocking accept or read returns
        // EINTR so its loop can look at the flag.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signo, &action, std::ptr::null_mut());
        }
    }
}

/// Whether a first signal has arrived.
pub fn requested() -> bool {
    FIRST.load(Ordering::Relaxed) != 0
}

/// The name of the signal that arrived first (`SIGINT`, `SIGTERM`), if any.
pub fn signal_name() -> Option<&'static str> {
    match FIRST.load(Ordering::Relaxed) {
        0 => None,
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => Some("a signal"),
    }
}
