//! F26: what `fork` does to the library's process-wide locks, and the fork generation.
//!
//! A [`ForkLock`] is a mutex that the `pthread_atfork` handler takes before every fork, in
//! registration order, and releases after it: in the parent unchanged, in the child after
//! its `in_child` function has reset what belonged to the parent's other threads. So a lock
//! that another thread held while the process forked is never found held in the child, and
//! the data it guards is consistent (nobody was in the middle of changing it).
//!
//! Nothing nests: no code holds one registered lock while taking another (each guards a
//! short, self-contained section with no callback, log line or drop of a context inside),
//! so the handler's order cannot deadlock with a thread of the library.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::fdident::current_pid;

/// Bumped in every child (by the handler, or on the first call that sees a new pid).
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The process the generation belongs to.
static PID: AtomicI32 = AtomicI32::new(0);

/// The fork generation of this process: changes in a child of `fork`, before the child's
/// first call into the library can use anything inherited. Contexts compare it with the one
/// their client identity was made in (F26).
pub fn generation() -> u64 {
    install();
    let pid = current_pid();
    let seen = PID.load(SeqCst);
    if seen != pid && PID.compare_exchange(seen, pid, SeqCst, SeqCst).is_ok() && seen != 0 {
        // A child the handler did not see (made by a raw clone(2)); 0: the first call ever.
        GENERATION.fetch_add(1, SeqCst);
    }
    GENERATION.load(SeqCst)
}

/// A process-wide lock that is safe across `fork` (see the module doc).
pub struct ForkLock<T: 'static> {
    mutex: Mutex<T>,
    /// Run in the child, with the lock held, before anything else can use it.
    in_child: fn(&mut T),
    registered: AtomicBool,
}

impl<T: Send + 'static> ForkLock<T> {
    pub const fn new(value: T, in_child: fn(&mut T)) -> ForkLock<T> {
        ForkLock {
            mutex: Mutex::new(value),
            in_child,
            registered: AtomicBool::new(false),
        }
    }

    /// Locks it (a poisoned lock is used as it is: every section leaves the data valid).
    /// Registers it with the fork handler on first use; a `ForkLock` that is not `'static`
    /// (tests' own instances) is never registered: use [`ForkLock::lock_local`].
    pub fn lock(&'static self) -> MutexGuard<'static, T> {
        self.register();
        self.lock_local()
    }

    /// Locks it without registering (for instances that are not process-wide).
    pub fn lock_local(&self) -> MutexGuard<'_, T> {
        self.mutex.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks it if no one holds it (never blocks).
    pub fn try_lock_local(&self) -> Option<MutexGuard<'_, T>> {
        match self.mutex.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Registers it with the fork handler (idempotent; installs the handler once).
    pub fn register(&'static self) {
        if self.registered.load(SeqCst) {
            return;
        }
        install();
        // Under the registry's lock, which the handler holds across a fork: the registration
        // is either complete or not begun in the child, never half done.
        let mut reg = registry();
        if !self.registered.swap(true, SeqCst) {
            reg.push(self);
        }
    }
}

/// An object (a context) that must look at itself in a child of `fork`, before the child runs:
/// the handler calls [`AfterFork::in_child`] on every live one, single-threaded, with every
/// registered lock held by the handler. It must not block (try-locks only) and must not log.
pub trait AfterFork: Send + Sync {
    fn in_child(&self);
}

/// The live objects to tell about a fork, by the id they were registered with.
type Watched = Vec<(u64, std::sync::Weak<dyn AfterFork>)>;

static AFTER_FORK: ForkLock<Watched> = ForkLock::new(Vec::new(), tell_after_fork);

fn tell_after_fork(objects: &mut Watched) {
    for (_, o) in objects.iter() {
        if let Some(o) = o.upgrade() {
            o.in_child();
        }
    }
}

/// Registers `object` (under `id`) to be told about every fork until [`forget`]`(id)`.
pub fn after_fork(id: u64, object: std::sync::Weak<dyn AfterFork>) {
    AFTER_FORK.lock().push((id, object));
}

/// Unregisters the object of `id` (from its drop: the registry never keeps its memory).
pub fn forget(id: u64) {
    let removed: Vec<_> = {
        let mut v = AFTER_FORK.lock();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *v)
            .into_iter()
            .partition(|(i, _)| *i == id);
        *v = kept;
        gone
    };
    drop(removed); // outside the lock
}

/// What the handler does with one registered lock.
trait Registered: Sync {
    fn hold(&'static self) -> Box<dyn Any>;
    fn release_in_child(&'static self, held: Box<dyn Any>);
}

impl<T: Send + 'static> Registered for ForkLock<T> {
    fn hold(&'static self) -> Box<dyn Any> {
        Box::new(self.lock_local())
    }

    fn release_in_child(&'static self, held: Box<dyn Any>) {
        if let Ok(mut guard) = held.downcast::<MutexGuard<'static, T>>() {
            (self.in_child)(&mut guard);
        }
    }
}

static REGISTRY: Mutex<Vec<&'static dyn Registered>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<&'static dyn Registered>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The locks the forking thread holds between `prepare` and `parent`/`child`.
type Held = (
    MutexGuard<'static, Vec<&'static dyn Registered>>,
    Vec<(&'static dyn Registered, Box<dyn Any>)>,
);

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Things whose lazy initialisation must not be in progress on another thread at a fork (a
/// `OnceLock` being initialised by a thread that the child does not have blocks the child
/// forever): the handler runs these first, which waits for any initialisation in progress.
static INITIALISERS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Registers `init` to be run before every fork (idempotent per function).
pub fn before_fork(init: fn()) {
    install();
    let mut v = INITIALISERS.lock().unwrap_or_else(PoisonError::into_inner);
    if !v.iter().any(|f| *f as usize == init as usize) {
        v.push(init);
    }
}

extern "C" fn prepare() {
    let _ = std::panic::catch_unwind(|| {
        let inits: Vec<fn()> = INITIALISERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for init in inits {
            init();
        }
        // The errno texts are read once into a table; never half-read at a fork.
        let _ = crate::error::strerror(libc::EPERM);
        let reg = registry();
        let held: Vec<_> = reg.iter().map(|r| (*r, r.hold())).collect();
        HELD.with(|h| *h.borrow_mut() = Some((reg, held)));
    });
}

extern "C" fn parent() {
    let _ = std::panic::catch_unwind(|| {
        let held = HELD.with(|h| h.borrow_mut().take());
        if let Some((reg, mut locks)) = held {
            while let Some(l) = locks.pop() {
                drop(l);
            }
            drop(reg);
        }
    });
}

extern "C" fn child() {
    let _ = std::panic::catch_unwind(|| {
        super::fdident::forget_call_pid();
        PID.store(current_pid(), SeqCst);
        GENERATION.fetch_add(1, SeqCst);
        let held = HELD.with(|h| h.borrow_mut().take());
        if let Some((reg, mut locks)) = held {
            while let Some((r, guard)) = locks.pop() {
                r.release_in_child(guard);
            }
            drop(reg);
        }
    });
}

/// Installs the fork handler once, lazily (nothing is installed until the library keeps
/// process-wide state). Never waits: a thread that finds another installing it goes on (a
/// `Once` would block forever in a child forked while its parent was installing it).
fn install() {
    static STATE: AtomicU8 = AtomicU8::new(0); // 0 not installed, 1 installing, 2 installed
    if STATE.load(SeqCst) == 2 {
        return;
    }
    if STATE.compare_exchange(0, 1, SeqCst, SeqCst).is_ok() {
        PID.store(current_pid(), SeqCst);
        // SAFETY: pthread_atfork(3) registers three plain `extern "C" fn()` with static
        // lifetime; they catch every panic. It fails only with ENOMEM, then the pid check of
        // `generation()` still re-keys contexts in a child.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        STATE.store(2, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static COUNTER: ForkLock<u32> = ForkLock::new(0, |c| *c += 1000);

    #[test]
    fn a_lock_held_by_another_thread_at_fork_is_free_in_the_child() {
        *COUNTER.lock() += 1;
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _g = COUNTER.lock();
            tx.send(()).unwrap();
            // Holds the lock until told; the fork below waits for it in the handler.
            let _ = stop_rx.recv_timeout(std::time::Duration::from_millis(200));
        });
        rx.recv().unwrap();
        let g0 = generation();
        // SAFETY: fork(2); the child only locks, checks and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = generation() != g0 && *COUNTER.lock() >= 1000;
            // SAFETY: _exit(2) ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(pid > 0);
        let _ = stop_tx.send(());
        holder.join().unwrap();
        let mut status = 0;
        // SAFETY: waits for the child we made.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
        assert_eq!(generation(), g0, "the parent keeps its generation");
        assert!(*COUNTER.lock() < 1000, "the parent's value is untouched");
    }
}
