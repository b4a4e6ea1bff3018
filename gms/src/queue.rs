// SPDX-License-Identifier: GPL-2.0-only
//! A first-in, first-out queue over slots its owner supplies, for items that need not be
//! `Copy` (a block request's page, which is completed exactly once): any slice of
//! `Option`s the runtime sized at set-up (a boxed slice, a `KVVec`) or an [`Inline`]
//! array. Like [`crate::table`] it never allocates, never uses `unsafe`, and gives an
//! item back instead of panicking when it is full. The kernel's `/dev/gms0` queues its
//! pages from blk-mq in one ([`crate::store`] takes them as it has room), and
//! [`crate::cache::PageCache`] keeps its insertion order in one.
//!
//! ```
//! use gms::queue::{Inline, Queue};
//!
//! let mut q = Queue::over(Inline([const { None::<String> }; 2]));
//! assert!(q.push_back("a".to_string()).is_ok() && q.push_back("b".to_string()).is_ok());
//! assert_eq!(q.push_back("c".to_string()), Err("c".to_string())); // full: given back
//! let a = q.pop_front().unwrap();
//! q.push_front(a).unwrap(); // not taken after all: first again
//! assert_eq!(q.pop_front().as_deref(), Some("a"));
//! ```

use core::ops::DerefMut;

pub use super::table::Inline;

/// A queue over the slots in `B` (a slice of `Option<T>`; a `None` slot is free).
#[derive(Clone, Copy, Debug)]
pub struct Queue<B> {
    slots: B,
    /// The slot of the front item, and how many items there are.
    head: usize,
    len: usize,
}

impl<B> Queue<B> {
    /// An empty queue over `slots`, which must all be `None` (items are put in slots
    /// from the front; a slot's old value is dropped when it is overwritten).
    pub const fn over(slots: B) -> Self {
        Queue { slots, head: 0, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T, B: DerefMut<Target = [Option<T>]>> Queue<B> {
    /// How many items it holds at most.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Add `v` at the back; when full, `v` is given back.
    pub fn push_back(&mut self, v: T) -> Result<(), T> {
        if self.is_full() {
            return Err(v);
        }
        let i = self.slot(self.len);
        self.slots[i] = Some(v);
        self.len += 1;
        Ok(())
    }

    /// Put `v` first (an item just taken and not used after all); when full, `v` is
    /// given back.
    pub fn push_front(&mut self, v: T) -> Result<(), T> {
        if self.is_full() {
            return Err(v);
        }
        // Not full, so there is a slot before the front (the last one when it is slot 0).
        self.head = if self.head == 0 { self.slots.len() } else { self.head } - 1;
        self.slots[self.head] = Some(v);
        self.len += 1;
        Ok(())
    }

    /// Take the front item.
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.slots[self.head].take();
        self.head = self.slot(1);
        self.len -= 1;
        v
    }

    /// The slot of the `i`-th item from the front (`i` ≤ the capacity; no division, so
    /// no divide-by-zero path for a zero capacity).
    fn slot(&self, i: usize) -> usize {
        let at = self.head + i;
        // Past the last slot: on from the first.
        at.checked_sub(self.slots.len()).unwrap_or(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items that are not `Copy`, each to be handed out exactly once.
    #[derive(Debug, PartialEq, Eq)]
    struct Page(u32);

    #[test]
    fn items_come_out_once_in_order_across_the_wrap() {
        let mut q = Queue::over(Inline([const { None::<Page> }; 3]));
        let mut next = 0;
        let mut out = 0;
        for round in 0..10u32 {
            // Fill it, then take two: the front moves round the slots.
            while q.push_back(Page(next)).is_ok() {
                next += 1;
            }
            assert!(q.is_full() && q.len() == 3, "round {round}");
            for _ in 0..2 {
                assert_eq!(q.pop_front(), Some(Page(out)));
                out += 1;
            }
        }
        while let Some(p) = q.pop_front() {
            assert_eq!(p, Page(out));
            out += 1;
        }
        assert_eq!((out, q.len(), q.is_empty()), (next, 0, true));
    }

    #[test]
    fn an_item_put_back_is_next_and_a_full_queue_gives_items_back() {
        let mut q = Queue::over(Inline([const { None::<Page> }; 2]));
        assert_eq!(q.pop_front(), None);
        q.push_back(Page(1)).unwrap();
        q.push_back(Page(2)).unwrap();
        assert_eq!(q.push_back(Page(3)), Err(Page(3)));
        assert_eq!(q.push_front(Page(0)), Err(Page(0)));
        let first = q.pop_front().unwrap();
        q.push_front(first).unwrap();
        assert_eq!([q.pop_front(), q.pop_front(), q.pop_front()], [Some(Page(1)), Some(Page(2)), None]);
        // From an empty queue whose front is slot 0, `push_front` wraps to the last slot.
        q.push_front(Page(9)).unwrap();
        q.push_back(Page(10)).unwrap();
        assert_eq!([q.pop_front(), q.pop_front()], [Some(Page(9)), Some(Page(10))]);
    }

    #[test]
    fn a_queue_of_no_slots_takes_nothing() {
        let mut q = Queue::over(Inline::<Option<Page>, 0>([]));
        assert!(q.is_full() && q.is_empty() && q.capacity() == 0);
        assert_eq!(q.push_back(Page(1)), Err(Page(1)));
        assert_eq!(q.push_front(Page(2)), Err(Page(2)));
        assert_eq!(q.pop_front(), None);
    }
}
