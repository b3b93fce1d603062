//! F10: the reconnect hook, run with the loop state released so that its calls on the same
//! context run as single attempts on the new connection. Used by both paths that reconnect:
//! a reply-bearing call's attempt and the fire-and-forget path.

use std::cell::RefCell;

use super::{CallEnv, LoopState};
use crate::failover::classify::AttemptOutcome;

/// F10: runs the hook with the state released and `in_hook` set. `Err` is the failed attempt;
/// a context stopped from inside the hook ends the call here (F20).
pub fn run_hook(env: &CallEnv<'_>) -> Result<(), AttemptOutcome> {
    /// Clears `in_hook` even if the hook unwinds.
    struct InHook<'a>(&'a RefCell<LoopState>);
    impl Drop for InHook<'_> {
        fn drop(&mut self) {
            if let Ok(mut l) = self.0.try_borrow_mut() {
                l.book.in_hook = false;
            }
        }
    }
    {
        let mut l = env.link.borrow_mut();
        l.book.in_hook = true;
        l.book.hook_nth = 0;
        l.book.hook_transport_error = None;
    }
    let guard = InHook(env.link);
    let rc = env.callbacks.run_reconnect_hook();
    drop(guard);
    env.waker.check().map_err(AttemptOutcome::Transport)?;
    let transport = env.link.borrow_mut().book.hook_transport_error.take();
    match rc {
        Some(rc) if rc < 0 => {
            Err(transport.map_or(AttemptOutcome::Status(rc), AttemptOutcome::Transport))
        }
        _ => {
            env.link.borrow_mut().book.hook_done();
            Ok(())
        }
    }
}
