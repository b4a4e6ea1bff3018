// SPDX-License-Identifier: GPL-2.0-only
//! A fixed-capacity FIFO of `Copy` items (no heap, no `unsafe`).

#[derive(Clone, Copy)]
pub struct Ring<T: Copy, const N: usize> {
    items: [Option<T>; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Ring<T, N> {
    pub const fn new() -> Self {
        Ring { items: [None; N], head: 0, len: 0 }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn is_full(&self) -> bool {
        self.len == N
    }
    /// Append `v`; gives it back if the ring is full.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        if self.len == N {
            return Err(v);
        }
        self.items[(self.head + self.len) % N] = Some(v);
        self.len += 1;
        Ok(())
    }
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.items[self.head].take();
        self.head = (self.head + 1) % N;
        self.len -= 1;
        v
    }
    /// Append the item `init` (built in its slot), then let `fill` finish it there: a
    /// large item is not built on the stack and moved. Gives `init` back if the ring is
    /// full.
    #[inline]
    pub fn push_with(&mut self, init: T, fill: impl FnOnce(&mut T)) -> Result<(), T> {
        if self.len == N {
            return Err(init);
        }
        fill(self.items[(self.head + self.len) % N].insert(init));
        self.len += 1;
        Ok(())
    }
    /// Drop the oldest item (after [`Self::peek`] looked at it) without moving it out.
    pub fn discard(&mut self) {
        if self.len > 0 {
            self.items[self.head] = None;
            self.head = (self.head + 1) % N;
            self.len -= 1;
        }
    }
    pub fn peek(&self) -> Option<&T> {
        if self.len == 0 {
            None
        } else {
            self.items[self.head].as_ref()
        }
    }
}

impl<T: Copy, const N: usize> Default for Ring<T, N> {
    fn default() -> Self {
        Self::new()
    }
}
