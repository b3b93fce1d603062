//! A crowd of connections that have not shown who they are (C9 amended, issue 27): a budget
//! of their own, apart from the node's connection slots, where a newcomer evicts the oldest
//! once the crowd is full. A flood of strangers (idle or half-open sockets, handshakes that
//! never finish, anonymous connections) then costs at most the crowd's places and never a
//! slot of an authenticated caller; and since the oldest go first, a stranger that holds its
//! place longer than newcomers arrive is the one closed, not the caller whose handshake is
//! under way (it needs a few milliseconds of the crowd's turnover).
//!
//! Used by the client port (connections before their TLS handshake or while anonymous) and
//! the metrics endpoint (connections before their request is answered).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// A bounded crowd; see the module doc.
pub struct Crowd {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Oldest first.
    queue: VecDeque<(u64, Arc<Signal>)>,
}

/// Tells a place that it was evicted.
#[derive(Default)]
struct Signal {
    evicted: AtomicBool,
    notify: Notify,
}

/// A connection's place in a [`Crowd`]; leaving it (drop) frees the place.
pub struct Place {
    crowd: Arc<Crowd>,
    id: u64,
    signal: Arc<Signal>,
}

impl Crowd {
    /// A crowd of at most `cap` places (at least one).
    pub fn new(cap: usize) -> Arc<Crowd> {
        Arc::new(Crowd {
            cap: cap.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    /// A place for a newcomer; `true` when the oldest place was evicted to make room.
    pub fn enter(self: &Arc<Self>) -> (Place, bool) {
        let signal = Arc::new(Signal::default());
        let mut inner = self.inner.lock().expect("crowd");
        let evicted = if inner.queue.len() >= self.cap {
            inner.queue.pop_front().map(|(_, s)| {
                s.evicted.store(true, Ordering::SeqCst);
                // A permit is stored if nobody waits yet: the wake is never lost.
                s.notify.notify_one();
            })
        } else {
            None
        };
        inner.next += 1;
        let id = inner.next;
        inner.queue.push_back((id, signal.clone()));
        drop(inner);
        (
            Place {
                crowd: self.clone(),
                id,
                signal,
            },
            evicted.is_some(),
        )
    }

    /// Places taken now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().expect("crowd").queue.len()
    }
}

impl Place {
    /// Resolves once this place was evicted (at once if it already was).
    pub async fn evicted(&self) {
        if self.signal.evicted.load(Ordering::SeqCst) {
            return;
        }
        self.signal.notify.notified().await;
    }

    #[cfg(test)]
    fn is_evicted(&self) -> bool {
        self.signal.evicted.load(Ordering::SeqCst)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut inner = self.crowd.inner.lock().expect("crowd");
        if let Some(i) = inner.queue.iter().position(|(k, _)| *k == self.id) {
            inner.queue.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_goes_first_and_a_leaver_frees_its_place() {
        let c = Crowd::new(3);
        let (a, ea) = c.enter();
        let (b, eb) = c.enter();
        let (d, ed) = c.enter();
        assert_eq!((ea, eb, ed, c.len()), (false, false, false, 3));
        // Full: the newcomer evicts the oldest (a), nobody else.
        let (e, ee) = c.enter();
        assert!(ee && a.is_evicted());
        assert!(!b.is_evicted() && !d.is_evicted() && !e.is_evicted());
        assert_eq!(c.len(), 3);
        // b leaves by itself: a place is free, nobody is evicted for the next one.
        drop(b);
        let (f, ef) = c.enter();
        assert!(!ef && !d.is_evicted());
        // An evicted place dropped later frees nothing twice.
        drop(a);
        assert_eq!(c.len(), 3);
        let (_g, eg) = c.enter();
        assert!(eg && d.is_evicted() && !e.is_evicted() && !f.is_evicted());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn eviction_wakes_a_waiting_place_and_one_evicted_before_waiting() {
        let c = Crowd::new(1);
        let (a, _) = c.enter();
        let waiting = tokio::spawn(async move {
            a.evicted().await;
            a.is_evicted()
        });
        tokio::task::yield_now().await;
        let (b, _) = c.enter();
        assert!(waiting.await.unwrap());
        // Evicted before anyone waits: the wait ends at once, and again.
        let (_c, _) = c.enter();
        assert!(b.is_evicted());
        b.evicted().await;
        b.evicted().await;
    }
}
