//! Receiver variants (`recv --variants`): the settings a test asked for by name, applied for
//! that test alone and reverted when it ends, however it ends.

use super::ReceiverState;
use crate::session::receiver::{EventSink, ServerEvent};
use crate::sys::settings::{self, Journal, SharedJournal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receiver-side settings applied for one test; reverted when dropped.
pub(super) struct VariantGuard<'a> {
    journal: SharedJournal,
    active: &'a AtomicBool,
    name: String,
    events: EventSink,
}

impl Drop for VariantGuard<'_> {
    fn drop(&mut self) {
        let outcome = self.journal.lock().unwrap_or_else(|p| p.into_inner()).revert();
        if let Err(e) = outcome {
            (self.events)(ServerEvent::VariantFailed { name: self.name.clone(), error: e.message });
        }
        self.active.store(false, Ordering::Release);
    }
}

/// How long a new test waits for a variant's revert, or for the tests a variant must not
/// share the host with, to end.
const VARIANT_WAIT: Duration = Duration::from_secs(10);

/// Waits (bounded) until no variant is applied and, with `alone`, this is the only test.
pub(super) fn wait_for_host(shared: &ReceiverState, alone: bool) -> bool {
    let deadline = Instant::now() + VARIANT_WAIT;
    loop {
        let free = !shared.variant_active.load(Ordering::Acquire) && (!alone || shared.admissions.running() <= 1);
        if free || Instant::now() > deadline {
            return free;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The state file of the variant a test of this receiver runs under.
fn state_file(port: u16) -> std::path::PathBuf {
    settings::default_state(&format!("recv-variant-{port}"))
}

/// At start: reverts a variant journal an earlier run of this receiver left (killed during a
/// test under a variant: the host still has its settings). Returns what was restored; an
/// error names the revert command, and the receiver does not start on an altered host.
pub(super) fn revert_leftover(port: u16) -> crate::base::error::Result<Vec<String>> {
    let path = state_file(port);
    if !path.exists() {
        return Ok(Vec::new());
    }
    Journal::open(&path).and_then(|mut j| j.revert()).map_err(|e| {
        crate::base::error::Error::unsupported(format!(
            "an earlier run left receiver variant settings applied and they could not be reverted ({}): \
             run `uringbench settings revert --state {}`",
            e.message,
            path.display()
        ))
    })
}

/// Whether a test may ask for variant `name` here, before it waits for anything: the refusal's
/// reason if not.
pub(super) fn check_variant(shared: &ReceiverState, name: &str) -> std::result::Result<(), String> {
    let Some(variants) = shared.cfg.variants.as_ref() else {
        return Err(format!("receiver variant '{name}' asked for, but this receiver has no --variants file"));
    };
    variants.get(name).map(|_| ())
}

/// Applies receiver variant `name` from `--variants`, or says why not (the refusal's reason,
/// which goes to the remote sender: local paths and errors stay in the receiver's log).
pub(super) fn apply_variant<'a>(
    shared: &'a ReceiverState,
    name: &str,
) -> std::result::Result<VariantGuard<'a>, String> {
    let Some(variants) = shared.cfg.variants.as_ref() else {
        return Err(format!("receiver variant '{name}' asked for, but this receiver has no --variants file"));
    };
    let changes = variants.get(name)?;
    let others = shared.admissions.running().saturating_sub(1);
    if others > 0 || shared.variant_active.swap(true, Ordering::AcqRel) {
        return Err(format!("receiver busy: variant '{name}' needs the host to itself ({others} other tests running)"));
    }
    let local_failure = |e: crate::base::error::Error| {
        (shared.events)(ServerEvent::VariantFailed { name: name.to_owned(), error: e.message });
        format!("receiver variant '{name}' could not be applied on the receiver (its log says why)")
    };
    let state = state_file(shared.cfg.port);
    let journal = match Journal::create(&state, &format!("uringbench recv variant {name}")) {
        Ok(j) => settings::register(j),
        Err(e) => {
            shared.variant_active.store(false, Ordering::Release);
            return Err(local_failure(e));
        }
    };
    let guard = VariantGuard {
        journal,
        active: &shared.variant_active,
        name: name.to_owned(),
        events: Arc::clone(&shared.events),
    };
    let mut applied = Vec::new();
    for change in changes {
        let outcome = guard.journal.lock().unwrap_or_else(|p| p.into_inner()).apply(change);
        match outcome {
            Ok(Some(what)) => applied.push(what),
            Ok(None) => applied.push(format!("{} (already so)", change.describe())),
            // Dropping the guard reverts what was applied so far.
            Err(e) => return Err(local_failure(e)),
        }
    }
    (shared.events)(ServerEvent::VariantApplied { name: name.to_owned(), applied });
    Ok(guard)
}
