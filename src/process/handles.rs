//! F20 (amended): handles that cannot dangle. The value C holds is an index into a table plus
//! the generation of that slot, checked under the table's lock before anything is touched: a
//! handle that was released — however many handles were released since, however the slot was
//! reused — is recognised as stale, never followed into freed memory (the `slotmap` idea).
//!
//! Encoding (64-bit): bits 0–31 are the slot index + 1 (never 0, so a handle is never NULL),
//! bits 32–63 the slot's generation (odd while the slot is occupied, so 0 is never valid). A
//! slot whose generation would wrap is retired for good instead of reused. Released slots are
//! reused oldest first. A value that was never a handle (a pointer of another library, a
//! handle of the other kind) is refused as foreign or as the wrong kind.

use std::collections::VecDeque;

/// What a handle is a handle of (distinct C types: `xcecli_ctx_t`, `xcecli_call_t`,
/// `xce_joblist_pager *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Context,
    Call,
    /// A paged listing (`xce_joblist_pager *`).
    Pager,
}

/// Why a handle value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It was a handle once; it has been released (stopped or freed).
    Released,
    /// A live handle of the other kind.
    WrongKind,
    /// Never a handle of this table.
    Foreign,
}

struct Slot<T> {
    generation: u32,
    entry: Option<(Kind, T)>,
}

/// Most slots (live handles at once); far above any real process.
pub const MAX_HANDLES: usize = 1 << 24;

/// The table (see the module doc). Each process has one, in the C layer.
pub struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    /// Released slots, oldest first.
    free: VecDeque<u32>,
    /// Which table of the process this is, in the handle's bits [`TAG_SHIFT`]..32: the
    /// handles of two tables never have the same value, so one table's handle is foreign to
    /// the other (a pager handle passed to `xcecli_stop` is refused, not taken for a context).
    tag: u8,
}

/// Where a table's tag sits in the low word of a handle (above every index, `MAX_HANDLES`).
const TAG_SHIFT: u32 = 28;
/// Most tables a process can tell apart.
pub const MAX_TAGS: u8 = 16;

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        HandleTable::new()
    }
}

fn encode(tag: u8, index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (u64::from(tag) << TAG_SHIFT) | (index as u64 + 1)
}

fn decode(tag: u8, h: u64) -> Option<(usize, u32)> {
    let low = h & 0xFFFF_FFFF;
    let index = (low & ((1 << TAG_SHIFT) - 1)) as usize;
    let generation = (h >> 32) as u32;
    (low >> TAG_SHIFT == u64::from(tag) && index != 0 && generation & 1 == 1)
        .then(|| (index - 1, generation))
}

impl<T> HandleTable<T> {
    /// The table with tag 0.
    pub const fn new() -> HandleTable<T> {
        HandleTable::tagged(0)
    }

    /// A table whose handles carry `tag` (< [`MAX_TAGS`]): the process's tables each have
    /// their own.
    pub const fn tagged(tag: u8) -> HandleTable<T> {
        assert!(tag < MAX_TAGS);
        HandleTable {
            slots: Vec::new(),
            free: VecDeque::new(),
            tag,
        }
    }

    /// Stores the value `make(handle)` returns and gives its handle; `None` when the table
    /// is full.
    pub fn insert_with(&mut self, kind: Kind, make: impl FnOnce(u64) -> T) -> Option<u64> {
        let index = match self.free.pop_front() {
            Some(i) => i as usize,
            None => {
                if self.slots.len() >= MAX_HANDLES {
                    return None;
                }
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.generation += 1; // even (free) → odd (occupied)
        let h = encode(self.tag, index, slot.generation);
        slot.entry = Some((kind, make(h)));
        Some(h)
    }

    /// The live value of `h`, if `h` is a live handle of `kind`.
    pub fn get(&self, h: u64, kind: Kind) -> Result<&T, Refused> {
        let (index, generation) = decode(self.tag, h).ok_or(Refused::Foreign)?;
        let slot = self.slots.get(index).ok_or(Refused::Foreign)?;
        if generation > slot.generation {
            return Err(Refused::Foreign);
        }
        match &slot.entry {
            Some((k, v)) if slot.generation == generation => {
                if *k == kind {
                    Ok(v)
                } else {
                    Err(Refused::WrongKind)
                }
            }
            _ => Err(Refused::Released),
        }
    }

    /// The live value of `h` whatever its kind, with the kind.
    pub fn get_any(&self, h: u64) -> Result<(Kind, &T), Refused> {
        self.get(h, Kind::Context)
            .map(|v| (Kind::Context, v))
            .or_else(|e| match e {
                Refused::WrongKind => self.get(h, Kind::Call).map(|v| (Kind::Call, v)),
                e => Err(e),
            })
    }

    /// Releases `h` (a live handle of `kind`) and gives its value back (the caller drops it,
    /// outside any lock).
    pub fn remove(&mut self, h: u64, kind: Kind) -> Result<T, Refused> {
        self.get(h, kind)?;
        let (index, _) = decode(self.tag, h).ok_or(Refused::Foreign)?;
        let slot = &mut self.slots[index];
        let (_, value) = slot.entry.take().ok_or(Refused::Released)?;
        slot.generation += 1; // odd → even
        if slot.generation < u32::MAX - 1 {
            self.free.push_back(index as u32);
        }
        Ok(value)
    }

    /// No live handle (every slot free or retired).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.entry.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_handle_stays_released_whatever_reuses_its_slot() {
        let mut t = HandleTable::new();
        let first = t.insert_with(Kind::Context, |_| 1).unwrap();
        assert_eq!(t.get(first, Kind::Context), Ok(&1));
        assert_eq!(t.get(first, Kind::Call), Err(Refused::WrongKind));
        assert_eq!(t.remove(first, Kind::Context), Ok(1));
        for i in 0..10_000 {
            let h = t.insert_with(Kind::Context, |_| i).unwrap();
            assert_ne!(h, first);
            assert_eq!(t.remove(h, Kind::Context), Ok(i));
        }
        assert_eq!(t.get(first, Kind::Context), Err(Refused::Released));
        assert_eq!(t.remove(first, Kind::Context), Err(Refused::Released));
        assert!(t.is_empty());
    }

    #[test]
    fn foreign_values_are_refused() {
        let mut t: HandleTable<u8> = HandleTable::new();
        let h = t.insert_with(Kind::Call, |_| 0).unwrap();
        for v in [0, 1, h + 1, h ^ (1 << 32), 0x5555_5555_5000, u64::MAX] {
            assert!(t.get(v, Kind::Call).is_err(), "{v:#x}");
        }
        assert_eq!(t.get_any(h).map(|(k, _)| k), Ok(Kind::Call));
    }

    /// Two tables of one process never hand out the same value: each one's handles are
    /// foreign to the other (a pager handle is never taken for a context).
    #[test]
    fn tables_with_other_tags_refuse_each_others_handles() {
        let mut contexts: HandleTable<u8> = HandleTable::new();
        let mut pagers: HandleTable<u8> = HandleTable::tagged(1);
        let c = contexts.insert_with(Kind::Context, |_| 1).unwrap();
        let p = pagers.insert_with(Kind::Pager, |_| 2).unwrap();
        assert_ne!(c, p);
        assert_eq!(contexts.get_any(p).err(), Some(Refused::Foreign));
        assert_eq!(contexts.remove(p, Kind::Context), Err(Refused::Foreign));
        assert_eq!(pagers.get(c, Kind::Pager), Err(Refused::Foreign));
        assert_eq!(pagers.get(p, Kind::Pager), Ok(&2));
    }

    #[test]
    fn a_slot_is_retired_before_its_generation_wraps() {
        let mut t = HandleTable::new();
        let h = t.insert_with(Kind::Context, |_| ()).unwrap();
        t.slots[0].generation = u32::MAX - 2; // odd: occupied
        let h2 = encode(0, 0, u32::MAX - 2);
        assert_eq!(t.remove(h2, Kind::Context), Ok(()));
        assert_eq!(t.get(h, Kind::Context), Err(Refused::Released));
        let h3 = t.insert_with(Kind::Context, |_| ()).unwrap();
        assert_ne!(decode(0, h3).unwrap().0, 0, "slot 0 is retired");
    }
}
