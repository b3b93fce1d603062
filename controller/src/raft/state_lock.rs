//! The applied state's lock, which refuses to be taken twice by one thread.
//!
//! std's `RwLock` prefers writers: once the state machine asks for the write lock (every
//! applied batch does), a thread that already holds a read guard and asks for a second one
//! waits behind the writer, and the writer waits for that thread's first guard — both tokio
//! workers stopped, the whole node silent (S20's nemesis found it: a `hello` answered while
//! holding the state called `Ctx::info`, which read the state again for the CORRUPT alarm; the
//! primary answered nothing for two minutes). Whether it happens depends on when the writer
//! arrives, so a test could not be relied on to see it; instead every acquisition is counted
//! per thread and a second one on the same thread panics at once, in every build and on every
//! path a test walks — before the writer ever has to arrive. A read guard cannot cross an
//! `.await` (it is not `Send`), so "this thread holds it" is exact.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

thread_local! {
    /// Guards of any [`StateLock`] this thread holds now.
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// A poisoned lock: a writer panicked while changing the state.
#[derive(Debug)]
pub struct Poisoned;

/// An `RwLock` that refuses a second acquisition by the thread that holds it (see the module).
#[derive(Debug, Default)]
pub struct StateLock<T> {
    inner: RwLock<T>,
}

fn enter() {
    HELD.with(|h| {
        assert!(
            h.get() == 0,
            "the applied state's lock taken again by the thread that holds it: with a writer \
             waiting between the two, std's RwLock deadlocks (raft/state_lock.rs)"
        );
        h.set(1);
    });
}

fn leave() {
    HELD.with(|h| h.set(0));
}

impl<T> StateLock<T> {
    pub fn new(v: T) -> Self {
        StateLock {
            inner: RwLock::new(v),
        }
    }

    /// A shared guard; panics when this thread holds one of this kind already.
    pub fn read(&self) -> Result<ReadGuard<'_, T>, Poisoned> {
        enter();
        match self.inner.read() {
            Ok(g) => Ok(ReadGuard(g)),
            Err(_) => {
                leave();
                Err(Poisoned)
            }
        }
    }

    /// The exclusive guard; panics when this thread holds one of this kind already.
    pub fn write(&self) -> Result<WriteGuard<'_, T>, Poisoned> {
        enter();
        match self.inner.write() {
            Ok(g) => Ok(WriteGuard(g)),
            Err(_) => {
                leave();
                Err(Poisoned)
            }
        }
    }
}

pub struct ReadGuard<'a, T>(RwLockReadGuard<'a, T>);

pub struct WriteGuard<'a, T>(RwLockWriteGuard<'a, T>);

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        leave();
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        leave();
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_guard_at_a_time_per_thread() {
        let l = StateLock::new(1);
        {
            let a = l.read().unwrap();
            assert_eq!(*a, 1);
        }
        *l.write().unwrap() = 2;
        assert_eq!(*l.read().unwrap(), 2);
        // Other threads are not this thread: they share the lock as before.
        let a = l.read().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(*l.read().unwrap(), 2));
        });
        drop(a);
    }

    #[test]
    fn a_second_read_on_the_same_thread_is_refused() {
        let l = StateLock::new(());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _a = l.read().unwrap();
            let _b = l.read().unwrap();
        }));
        assert!(r.is_err());
        // The refused one left the count as the held one's drop set it.
        drop(l.read().unwrap());
    }
}
