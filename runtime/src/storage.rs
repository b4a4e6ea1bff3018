// SPDX-License-Identifier: GPL-2.0-only
//! Fixed-capacity tables whose memory the place supplies once, at set-up: [`Storage`]
//! (NetRPC's, shared with GMS) names where it comes from; [`Stack`] and [`Fifo`] never allocate after [`Stack::new`] /
//! [`Fifo::new`].

#[cfg(all(feature = "alloc", not(MODULE)))]
pub use super::netrpc::storage::Heap;
pub use super::netrpc::storage::Storage;

/// A stack of at most its capacity in elements.
pub struct Stack<T: Copy, S: Storage> {
    buf: S::Buf<T>,
    n: usize,
}

impl<T: Copy, S: Storage> Stack<T, S> {
    /// An empty stack of `cap` elements (`fill` only initialises the memory).
    pub fn new(cap: usize, fill: T) -> Option<Self> {
        Some(Stack { buf: S::buf(cap, fill)?, n: 0 })
    }
    /// Push `v`; `false` (nothing changed) when full.
    pub fn push(&mut self, v: T) -> bool {
        match self.buf.get_mut(self.n) {
            Some(s) => {
                *s = v;
                self.n += 1;
                true
            }
            None => false,
        }
    }
    pub fn pop(&mut self) -> Option<T> {
        self.n = self.n.checked_sub(1)?;
        Some(self.buf[self.n])
    }
    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    pub fn as_slice(&self) -> &[T] {
        &self.buf[..self.n]
    }
    /// Remove element `i`, replacing it with the last (order is not kept).
    pub fn swap_remove(&mut self, i: usize) -> Option<T> {
        if i >= self.n {
            return None;
        }
        let v = self.buf[i];
        self.n -= 1;
        self.buf[i] = self.buf[self.n];
        Some(v)
    }
    /// Remove the first element matching `f`.
    pub fn remove_where(&mut self, f: impl Fn(&T) -> bool) -> Option<T> {
        let i = self.as_slice().iter().position(f)?;
        self.swap_remove(i)
    }
}

/// A first-in, first-out queue of at most its capacity in elements.
pub struct Fifo<T: Copy, S: Storage> {
    buf: S::Buf<T>,
    head: usize,
    n: usize,
}

impl<T: Copy, S: Storage> Fifo<T, S> {
    pub fn new(cap: usize, fill: T) -> Option<Self> {
        Some(Fifo { buf: S::buf(cap, fill)?, head: 0, n: 0 })
    }
    /// Append `v`; `false` (nothing changed) when full.
    pub fn push_back(&mut self, v: T) -> bool {
        if self.n == self.buf.len() {
            return false;
        }
        let i = self.slot(self.n);
        self.buf[i] = v;
        self.n += 1;
        true
    }
    pub fn front(&self) -> Option<&T> {
        (self.n > 0).then(|| &self.buf[self.head])
    }
    pub fn pop_front(&mut self) -> Option<T> {
        if self.n == 0 {
            return None;
        }
        let v = self.buf[self.head];
        self.head = self.slot(1);
        self.n -= 1;
        Some(v)
    }
    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// Where the `i`-th element from the front is (`i` ≤ the capacity; no division, so no
    /// divide-by-zero path for a zero capacity).
    fn slot(&self, i: usize) -> usize {
        let at = self.head + i;
        if at >= self.buf.len() {
            at - self.buf.len()
        } else {
            at
        }
    }
    /// Whether any element matches `f`.
    pub fn any(&self, f: impl Fn(&T) -> bool) -> bool {
        (0..self.n).any(|i| f(&self.buf[self.slot(i)]))
    }
    /// Visit elements from the back while `f` returns `true` (it may change them).
    pub fn update_back_while(&mut self, mut f: impl FnMut(&mut T) -> bool) {
        for i in (0..self.n).rev() {
            let s = self.slot(i);
            if !f(&mut self.buf[s]) {
                break;
            }
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;

    #[test]
    fn stack_holds_its_capacity_and_no_more() {
        let mut s = Stack::<u32, Heap>::new(3, 0).unwrap();
        assert!(s.push(1) && s.push(2) && s.push(3));
        assert!(!s.push(4));
        assert_eq!(s.swap_remove(0), Some(1));
        assert_eq!(s.as_slice(), &[3, 2]);
        assert_eq!(s.remove_where(|&v| v == 2), Some(2));
        assert_eq!((s.pop(), s.pop()), (Some(3), None));
        assert!(s.is_empty());
    }

    #[test]
    fn fifo_wraps_and_keeps_order() {
        let mut q = Fifo::<u32, Heap>::new(3, 0).unwrap();
        for round in 0..5u32 {
            assert!(q.push_back(round) && q.push_back(round + 10));
            assert_eq!(q.pop_front(), Some(round));
            assert_eq!(q.pop_front(), Some(round + 10));
        }
        assert!(q.push_back(1) && q.push_back(2) && q.push_back(3) && !q.push_back(4));
        q.update_back_while(|v| {
            *v += 100;
            *v != 102
        });
        assert_eq!((q.pop_front(), q.pop_front(), q.pop_front()), (Some(1), Some(102), Some(103)));
        assert!(q.front().is_none() && !q.any(|_| true));
    }
}
