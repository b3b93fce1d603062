//! F20 (with defect 12): waits across threads that can never close a cycle.
//!
//! Two library calls wait for other threads: replacing a callback (`CallbackSlot::set` waits
//! until no other thread runs the old one) and stopping a context (`Gate::close` waits until no
//! call of it is in flight). Callbacks may call both. So a callback of context A that sets the
//! log sink, while the log sink on another thread stops A, would wait for each other forever.
//! Every such wait is registered here with the threads it waits for; a wait that would close a
//! cycle (a thread it waits for waits, directly or through others, for the waiting thread) is
//! refused with [`Cycle`], and the caller takes its documented way out instead of waiting
//! (`close` defers the end of the stop to the last call that leaves; `set` reports it).

use std::thread::ThreadId;

use super::fork::ForkLock;

/// Who waits for whom right now.
static WAITS: ForkLock<Vec<(ThreadId, Vec<ThreadId>)>> = ForkLock::new(Vec::new(), |w| w.clear());

/// Waiting would close a cycle of waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cycle;

/// A registered wait; unregistered when dropped.
pub struct Waiting {
    me: ThreadId,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITS.lock().retain(|(t, _)| *t != self.me);
    }
}

/// Whether `from` reaches `to` through registered waits.
fn reaches(waits: &[(ThreadId, Vec<ThreadId>)], from: ThreadId, to: ThreadId) -> bool {
    let mut seen = vec![from];
    let mut stack = vec![from];
    while let Some(t) = stack.pop() {
        if t == to {
            return true;
        }
        for (_, on) in waits.iter().filter(|(w, _)| *w == t) {
            for &n in on {
                if !seen.contains(&n) {
                    seen.push(n);
                    stack.push(n);
                }
            }
        }
    }
    false
}

/// Registers (or updates) that the calling thread waits for `on`; `Err(Cycle)` (nothing
/// registered) when one of them already waits, directly or not, for the calling thread.
/// Call again before each wait with the threads still awaited.
pub fn wait_for(on: &[ThreadId], current: Option<Waiting>) -> Result<Waiting, Cycle> {
    let me = std::thread::current().id();
    let mut waits = WAITS.lock();
    waits.retain(|(t, _)| *t != me);
    if on.iter().any(|&t| t == me || reaches(&waits, t, me)) {
        drop(waits);
        if let Some(w) = current {
            std::mem::forget(w); // already removed above
        }
        return Err(Cycle);
    }
    waits.push((me, on.to_vec()));
    drop(waits);
    if let Some(w) = current {
        std::mem::forget(w); // replaced by the new registration
    }
    Ok(Waiting { me })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_wait_that_closes_a_cycle_is_refused() {
        let me = std::thread::current().id();
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let w = wait_for(&[me], None).unwrap(); // the other thread waits for us
            tx.send(std::thread::current().id()).unwrap();
            go_rx.recv().unwrap();
            drop(w);
        });
        let them = rx.recv().unwrap();
        assert_eq!(wait_for(&[them], None).err(), Some(Cycle));
        go_tx.send(()).unwrap();
        other.join().unwrap();
        let w = wait_for(&[them], None).expect("no cycle any more");
        drop(w);
    }
}
