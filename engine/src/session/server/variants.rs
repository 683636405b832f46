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

/// Applies receiver variant `name` from `--variants`, or says why not (the refusal's reason).
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
    let state = settings::default_state(&format!("recv-variant-{}", shared.cfg.port));
    let journal = match Journal::create(&state, &format!("uringbench recv variant {name}")) {
        Ok(j) => settings::register(j),
        Err(e) => {
            shared.variant_active.store(false, Ordering::Release);
            return Err(e.message);
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
            Err(e) => return Err(format!("receiver variant '{name}' could not be applied: {}", e.message)),
        }
    }
    (shared.events)(ServerEvent::VariantApplied { name: name.to_owned(), applied });
    Ok(guard)
}
