//! SIGINT / SIGTERM / SIGHUP to epdoctor during a run: counted here, acted on by the cell loop.
//! The ranks run in their own process groups, so a terminal's Ctrl-C reaches only epdoctor,
//! which must stop them itself.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

static COUNT: AtomicUsize = AtomicUsize::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomics here: async-signal-safe.
    LAST.store(sig, Ordering::SeqCst);
    COUNT.fetch_add(1, Ordering::SeqCst);
}

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Restores the previous handlers when dropped.
pub struct Guard {
    old: Vec<(Signal, SigAction)>,
}

pub fn install() -> anyhow::Result<Guard> {
    COUNT.store(0, Ordering::SeqCst);
    LAST.store(0, Ordering::SeqCst);
    let act = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    let mut old = Vec::new();
    for s in SIGNALS {
        // SAFETY: the handler only touches atomics.
        let prev = unsafe { sigaction(s, &act) }?;
        old.push((s, prev));
    }
    Ok(Guard { old })
}

impl Drop for Guard {
    fn drop(&mut self) {
        for (s, a) in self.old.drain(..) {
            // SAFETY: restoring what was there before.
            let _ = unsafe { sigaction(s, &a) };
        }
    }
}

/// Signals received since `install`.
pub fn count() -> usize {
    COUNT.load(Ordering::SeqCst)
}

/// The last signal received, if any.
pub fn last() -> Option<Signal> {
    match LAST.load(Ordering::SeqCst) {
        0 => None,
        n => Signal::try_from(n).ok(),
    }
}
