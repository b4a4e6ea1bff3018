// SPDX-License-Identifier: GPL-2.0-only
//! Staging buffers: a FIFO allocator of contiguous packet buffers in a region of NIC
//! memory. Packets are freed in the order they were allocated, so the free space is at
//! most two runs (after the newest packet, and before the oldest one after a wrap).

/// Offsets are relative to the region; allocations are 8-byte aligned.
#[derive(Clone, Copy, Debug)]
pub struct Staging {
    size: u32,
    /// Start of the oldest live allocation (when not empty).
    head: u32,
    /// End of the newest live allocation (when not empty).
    tail: u32,
    /// Start of the newest live allocation (when not empty).
    newest: u32,
    live: u32,
}

pub const fn align8(n: u32) -> u32 {
    (n + 7) & !7
}

impl Staging {
    pub const fn new(size: u32) -> Self {
        Self { size: size & !7, head: 0, tail: 0, newest: 0, live: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Allocate `len` contiguous bytes; `None` if there is no room now.
    pub fn alloc(&mut self, len: u32) -> Option<u32> {
        // Refuse before rounding up: align8 overflows for len > u32::MAX - 7. Past this
        // check it cannot, as size is a multiple of 8.
        if len > self.size {
            return None;
        }
        let len = align8(len.max(1));
        if len > self.size {
            return None;
        }
        let off = if self.live == 0 {
            0
        } else if self.tail > self.head {
            if self.size - self.tail >= len {
                self.tail
            } else if self.head >= len {
                0
            } else {
                return None;
            }
        } else if self.head - self.tail >= len {
            // Wrapped (tail ≤ head): the only free run is between them.
            self.tail
        } else {
            return None;
        };
        if self.live == 0 {
            self.head = 0;
        }
        self.tail = off + len;
        self.newest = off;
        self.live += 1;
        Some(off)
    }

    /// Free the oldest allocation. `next_oldest` is the offset of the allocation that is
    /// now the oldest, if any remains.
    pub fn free_oldest(&mut self, next_oldest: Option<u32>) {
        debug_assert!(self.live > 0);
        self.live = self.live.saturating_sub(1);
        match next_oldest {
            Some(off) if self.live > 0 => self.head = off,
            _ => {
                self.live = 0;
                self.head = 0;
                self.tail = 0;
            }
        }
    }

    /// Cut the allocation at `off`, if it is the newest, to `len` bytes (a receive posted
    /// for a whole MTU whose packet turned out shorter): the rest is free again.
    pub fn shrink_newest(&mut self, off: u32, len: u32) {
        let end = off.saturating_add(align8(len.max(1)));
        if self.live > 0 && off == self.newest && end < self.tail {
            self.tail = end;
        }
    }

    /// Largest contiguous allocation that would succeed now.
    pub fn largest_free(&self) -> u32 {
        if self.live == 0 {
            self.size
        } else if self.tail > self.head {
            (self.size - self.tail).max(self.head)
        } else {
            self.head - self.tail
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_allocation_wraps_and_never_overlaps() {
        let mut s = Staging::new(1000);
        let a = s.alloc(400).unwrap();
        let b = s.alloc(400).unwrap();
        assert_eq!((a, b), (0, 400));
        assert_eq!(s.alloc(400), None); // 200 at the end, nothing at the start
        s.free_oldest(Some(b));
        let c = s.alloc(300).unwrap(); // wraps to the start
        assert_eq!(c, 0);
        assert_eq!(s.alloc(200), None); // only 100 between c and b
        s.free_oldest(Some(c));
        s.free_oldest(None);
        assert!(s.is_empty());
        assert_eq!(s.largest_free(), 1000);
    }

    #[test]
    fn the_newest_allocation_shrinks_to_what_arrived() {
        let mut s = Staging::new(1000);
        let a = s.alloc(400).unwrap();
        let b = s.alloc(400).unwrap();
        s.shrink_newest(b, 100);
        assert_eq!(s.alloc(400), Some(504)); // b ends at 504 now
        s.shrink_newest(a, 8); // not the newest: nothing moves
        assert_eq!(s.largest_free(), 96);
        s.shrink_newest(504, 2000); // never grows
        assert_eq!(s.largest_free(), 96);
    }
}
