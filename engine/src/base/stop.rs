//! One way to end a run early.
//!
//! Every run (stream, rr, crr, http, sweep, search, experiment, both receivers) is handed a
//! [`StopToken`]. Whoever may end it early — the CLI's signal watcher, a program using the
//! engine as a library, a receiver shutting down — calls [`StopToken::stop`] on a clone; the
//! run's loops look at [`StopToken::cause`] where they already look at their clock, end with
//! what they measured, and report it as interrupted. Nothing here is process-wide: two runs
//! with two tokens are stopped apart.

use std::sync::{Arc, OnceLock};

/// A request to end a run early, shared by its clones. The first cause given is kept.
#[derive(Debug, Clone, Default)]
pub struct StopToken(Arc<OnceLock<String>>);

impl StopToken {
    /// A token nobody has stopped yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every run holding this token (or a clone) to end early; `cause` says why, as a
    /// report shows it: "SIGINT", "SIGTERM", "cancelled by the caller". Returns whether this
    /// call was the first (later causes are dropped).
    pub fn stop(&self, cause: impl Into<String>) -> bool {
        self.0.set(cause.into()).is_ok()
    }

    /// Whether the run must end now (one atomic load: cheap enough for a sampler's loop).
    pub fn is_stopped(&self) -> bool {
        self.0.get().is_some()
    }

    /// Why the run must end, once it must.
    pub fn cause(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cause_is_kept_and_clones_share_it() {
        let token = StopToken::new();
        let clone = token.clone();
        assert!(!clone.is_stopped());
        assert_eq!(clone.cause(), None);
        assert!(token.stop("SIGINT"));
        assert!(!clone.stop("SIGTERM"), "a second stop is not the first");
        assert!(clone.is_stopped());
        assert_eq!(clone.cause(), Some("SIGINT"));
        assert!(!StopToken::new().is_stopped(), "another token is not stopped with it");
    }

    #[test]
    fn a_stop_from_another_thread_is_seen() {
        let token = StopToken::new();
        let remote = token.clone();
        std::thread::spawn(move || remote.stop("cancelled by the caller")).join().unwrap();
        assert_eq!(token.cause(), Some("cancelled by the caller"));
    }
}
