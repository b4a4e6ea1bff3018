// SPDX-License-Identifier: GPL-2.0-only
//! A reader's local page cache: pages fetched from network memory (mostly read ahead,
//! [`crate::readahead`]) kept in the runtime's frames, up to a capacity set at run time,
//! the oldest inserted evicted first. The cache owns the frames it holds; every frame it
//! lets go of (evicted, replaced) is handed to the caller's `release`. One cache for
//! every runtime (the kernel's `/dev/gms0`, the user-space ports). No heap, no `unsafe`.
//!
//! ```
//! use gms::cache::{Cached, PageCache};
//! use gms::prelude::*;
//!
//! let mut cache = PageCache::<u32, 8>::new();
//! cache.set_capacity(2, |_| {});
//! let page = |n| PageId::new(1, n);
//! let c = |frame| Cached { version: Version(1), frame, len: 4096 };
//! let mut released = Vec::new();
//! cache.insert(page(0), c(10), |f| released.push(f));
//! cache.insert(page(1), c(11), |f| released.push(f));
//! cache.insert(page(2), c(12), |f| released.push(f)); // full: page 0 goes
//! assert_eq!(released, [10]);
//! assert_eq!(cache.get(&page(2)).map(|c| c.frame), Some(12));
//! assert_eq!(cache.remove(&page(1)).map(|c| c.frame), Some(11)); // the caller's now
//! ```

use super::page::{PageId, Version};
use super::queue::{Inline, Queue};
use super::table::{InlineTable, Table};

/// A cached page: its version, the frame holding it, and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cached<T> {
    pub version: Version,
    pub frame: T,
    pub len: u32,
}

#[derive(Clone, Copy)]
struct Entry<T> {
    c: Cached<T>,
    /// Matches the page's newest entry in the insertion order.
    seq: u32,
}

/// Up to `N - N/8` pages (the table stays below 7/8 full), fewer if set so.
pub struct PageCache<T: Copy, const N: usize> {
    table: InlineTable<PageId, Entry<T>, N>,
    /// Insertion order, `(page, seq)`: an item whose seq is not the page's entry's any
    /// more was removed or replaced since, and is skipped.
    order: Queue<Inline<Option<(PageId, u32)>, N>>,
    seq: u32,
    cap: usize,
    /// Pages evicted to make room.
    pub evictions: u64,
}

impl<T: Copy, const N: usize> Default for PageCache<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> PageCache<T, N> {
    /// The most pages a cache of `N` slots keeps.
    pub const MAX: usize = N - N / 8;

    /// An empty cache of [`Self::MAX`] pages.
    pub const fn new() -> Self {
        Self::with_capacity(Self::MAX)
    }

    /// An empty cache of `pages` pages at most (clamped to [`Self::MAX`]).
    pub const fn with_capacity(pages: usize) -> Self {
        let cap = if pages < Self::MAX { pages } else { Self::MAX };
        PageCache { table: Table::new(), order: Queue::over(Inline([None; N])), seq: 0, cap, evictions: 0 }
    }

    /// Keep at most `pages` (clamped to [`Self::MAX`]; 0: cache nothing), evicting the
    /// oldest beyond that.
    pub fn set_capacity(&mut self, pages: usize, mut release: impl FnMut(T)) {
        self.cap = pages.min(Self::MAX);
        while self.table.len() > self.cap && self.evict_oldest(&mut release) {}
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }
    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn get(&self, page: &PageId) -> Option<Cached<T>> {
        self.table.get(page).map(|e| e.c)
    }

    pub fn contains(&self, page: &PageId) -> bool {
        self.table.contains(page)
    }

    /// Keep `c` as `page`, replacing an older copy and evicting the oldest page when full;
    /// the frames let go of (and `c.frame` itself when the capacity is 0) go to `release`.
    pub fn insert(&mut self, page: PageId, c: Cached<T>, mut release: impl FnMut(T)) {
        if let Some(old) = self.table.remove(&page) {
            release(old.c.frame);
        }
        while self.table.len() >= self.cap {
            if !self.evict_oldest(&mut release) {
                release(c.frame);
                return;
            }
        }
        if self.order.is_full() {
            // The order is full of items for pages removed since (or the oldest is live).
            self.evict_oldest(&mut release);
        }
        self.seq = self.seq.wrapping_add(1);
        let e = Entry { c, seq: self.seq };
        if let Err(full) = self.table.insert(page, e) {
            // Below 7/8 of N by construction; never lose a frame regardless.
            release(full.1.c.frame);
            return;
        }
        // Never full here: room was made above.
        let _ = self.order.push_back((page, self.seq));
    }

    /// Take `page` out of the cache (written, or its frame is wanted): its frame is the
    /// caller's.
    pub fn remove(&mut self, page: &PageId) -> Option<Cached<T>> {
        self.table.remove(page).map(|e| e.c)
    }

    /// Empty the cache, every frame to `release` (not counted as evictions).
    pub fn clear(&mut self, mut release: impl FnMut(T)) {
        let evictions = self.evictions;
        while self.evict_oldest(&mut release) {}
        self.evictions = evictions;
    }

    /// Evict the oldest live page (its frame to `release`); false if there is none.
    fn evict_oldest(&mut self, release: &mut impl FnMut(T)) -> bool {
        while let Some((page, seq)) = self.order.pop_front() {
            if self.table.get(&page).is_some_and(|e| e.seq == seq) {
                if let Some(e) = self.table.remove(&page) {
                    release(e.c.frame);
                    self.evictions += 1;
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(frame: u32) -> Cached<u32> {
        Cached { version: Version(1), frame, len: 4096 }
    }

    /// Every frame given to the cache comes back exactly once (held, released or
    /// removed), and the oldest live page is the one evicted.
    #[test]
    fn frames_are_never_lost_or_doubled() {
        let mut cache = PageCache::<u32, 16>::new();
        cache.set_capacity(5, |_| unreachable!());
        let mut out = [0u32; 4096];
        let mut next = 0u32;
        let mut rng = 0x1234_5678_u64;
        for _ in 0..3000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let page = PageId::new(0, rng % 9);
            match rng % 5 {
                0 => {
                    if let Some(x) = cache.remove(&page) {
                        out[x.frame as usize] += 1;
                    }
                }
                1 => cache.set_capacity((rng % 7) as usize, |f| out[f as usize] += 1),
                _ => {
                    cache.insert(page, c(next), |f| out[f as usize] += 1);
                    next += 1;
                }
            }
            assert!(cache.len() <= cache.capacity());
        }
        cache.clear(|f| out[f as usize] += 1);
        assert!(cache.is_empty());
        assert!(out[..next as usize].iter().all(|&n| n == 1), "each frame released once");
    }

    #[test]
    fn oldest_goes_first_even_after_replacements() {
        let mut cache = PageCache::<u32, 8>::new();
        cache.set_capacity(3, |_| {});
        let p = |n| PageId::new(0, n);
        cache.insert(p(1), c(1), |_| {});
        cache.insert(p(2), c(2), |_| {});
        cache.insert(p(1), c(3), |f| assert_eq!(f, 1)); // page 1 is now the newest
        cache.insert(p(3), c(4), |_| {});
        let mut gone = None;
        cache.insert(p(4), c(5), |f| gone = Some(f));
        assert_eq!(gone, Some(2), "page 2 is the oldest");
        assert_eq!(cache.evictions, 1);
    }
}
