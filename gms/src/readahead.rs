// SPDX-License-Identifier: GPL-2.0-only
//! Read-ahead from network memory: sequential-access detection per stream and the table of
//! pending fetches a reader waits on instead of fetching twice. No `unsafe`.
//!
//! A stream is an address space or file (`space`); pages are numbered within it. Every
//! reference goes through [`ReadAhead::on_access`], which both feeds the stream's detector
//! and says what the reader does: [`Decision::Hit`] (in the local cache),
//! [`Decision::WaitFor`] (a fetch of the page is pending: sleep on that call until
//! [`ReadAhead::complete`] reports it) or [`Decision::Fetch`] (fetch it now; the fetch is
//! recorded as pending too, so a second reader waits for it).
//!
//! After `trigger` (`K`) consecutive sequential accesses (each page one past the previous)
//! a stream wants the next `depth` (`N`) pages; [`ReadAhead::prefetches`] hands them out
//! — skipping pages that are cached or pending — as nonblocking getpages to issue now,
//! never more than `N` in flight per stream. Any non-sequential access resets the
//! detector; a failed prefetch (the page is not in network memory) does too. Every
//! prefetch and recorded fetch must end in [`ReadAhead::complete`] (a failed or timed-out
//! call, or one the runtime could not issue, with `ok = false`), or its entry stays.
//!
//! ```
//! use gms::readahead::{Config, Decision, ReadAhead};
//!
//! let mut ra = ReadAhead::<4, 16>::new(Config { trigger: 2, depth: 3 });
//! let cached = |_space: u64, _page: u64| false;
//! for page in 0..2 {
//!     let Decision::Fetch(Some(_)) = ra.on_access(9, page, false) else { panic!() };
//!     ra.complete(9, page, true); // the demand fetch finished
//!     assert_eq!(ra.prefetches(cached).count(), 0); // not sequential enough yet
//! }
//! let Decision::Fetch(_) = ra.on_access(9, 2, false) else { panic!() };
//! // Two sequential accesses (1 after 0, 2 after 1): prefetch pages 3, 4 and 5.
//! let issued: Vec<_> = ra.prefetches(cached).map(|p| p.page).collect();
//! assert_eq!(issued, [3, 4, 5]);
//! // A reader of page 3 waits for its prefetch instead of fetching it again.
//! assert!(matches!(ra.on_access(9, 3, false), Decision::WaitFor(_)));
//! ```

/// Read-ahead parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// `K`: consecutive sequential accesses before read-ahead starts (0: from the first).
    pub trigger: u32,
    /// `N`: pages read ahead, and the most prefetches in flight per stream (0: disabled).
    pub depth: u32,
}

/// Names one pending fetch (unique among the pending ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PendingId(pub u32);

/// What a reader of a page does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Decision {
    /// The page is in the local cache.
    Hit,
    /// A fetch of the page is pending: wait for it, then access the page again.
    WaitFor(PendingId),
    /// Fetch the page now. `Some`: the fetch is recorded as pending (other readers wait
    /// for it) and must be reported to [`ReadAhead::complete`]; `None`: the pending table
    /// is full, so the fetch is not recorded.
    Fetch(Option<PendingId>),
}

/// A prefetch to issue now (a nonblocking getpage whose continuation inserts the frame
/// into the local page cache and calls [`ReadAhead::complete`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefetch {
    pub space: u64,
    pub page: u64,
    pub id: PendingId,
}

/// A pending fetch that [`ReadAhead::complete`] ended: wake the readers waiting on `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub id: PendingId,
    /// Whether it was a prefetch (else a reader's fetch).
    pub prefetch: bool,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    space: u64,
    page: u64,
    id: PendingId,
    prefetch: bool,
}

#[derive(Clone, Copy, Debug)]
struct Stream {
    space: u64,
    /// The last page accessed.
    last: u64,
    /// Consecutive sequential accesses ending at `last`.
    run: u32,
    /// Pages `next..until` are wanted but not issued yet.
    next: u64,
    until: u64,
    /// Access clock of the last use, for replacing the least recently used stream.
    used: u64,
    /// Prefetches of `space` pending (kept equal to a count over the pending table, so
    /// the per-page checks need not scan it).
    in_flight: u32,
}

/// Sequential-access detectors for up to `STREAMS` streams (least recently used replaced)
/// and a table of up to `PENDING` pending fetches.
///
/// Call order: [`ReadAhead::on_access`] on each page reference, then drain
/// [`ReadAhead::prefetches`] (or [`ReadAhead::poll_prefetch`]) and issue what it yields;
/// [`ReadAhead::complete`] when a fetch ends.
#[derive(Clone, Debug)]
pub struct ReadAhead<const STREAMS: usize, const PENDING: usize> {
    config: Config,
    streams: [Option<Stream>; STREAMS],
    pending: [Option<Pending>; PENDING],
    /// Entries of `pending` in use.
    pending_count: usize,
    next_id: u32,
    /// `next_id` wrapped around once: a new id must be checked against the live ones.
    ids_wrapped: bool,
    clock: u64,
}

impl<const STREAMS: usize, const PENDING: usize> ReadAhead<STREAMS, PENDING> {
    pub const fn new(config: Config) -> Self {
        ReadAhead {
            config,
            streams: [None; STREAMS],
            pending: [None; PENDING],
            pending_count: 0,
            next_id: 0,
            ids_wrapped: false,
            clock: 0,
        }
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// Change `K` and `N`; applies from the next access (prefetches in flight stay).
    pub fn set_config(&mut self, config: Config) {
        self.config = config;
    }

    /// A reader references `page` of `space`; `cached` says whether it is in the local
    /// cache. Feeds the stream's detector and decides what the reader does.
    pub fn on_access(&mut self, space: u64, page: u64, cached: bool) -> Decision {
        self.detect(space, page);
        if cached {
            Decision::Hit
        } else if let Some(id) = self.pending_id(space, page) {
            Decision::WaitFor(id)
        } else {
            Decision::Fetch(self.insert(space, page, false))
        }
    }

    fn detect(&mut self, space: u64, page: u64) {
        self.clock += 1;
        let Some(i) = self.stream_slot(space) else { return };
        let Config { trigger, depth } = self.config;
        if self.streams[i].is_none_or(|s| s.space != space) {
            // A new stream: its space may have prefetches pending from an older one.
            let in_flight = self.count_prefetches(space) as u32;
            self.streams[i] = Some(Stream { space, last: page, run: 0, next: 0, until: 0, used: 0, in_flight });
        }
        let Some(s) = &mut self.streams[i] else { return };
        s.used = self.clock;
        if page != s.last {
            if s.last.checked_add(1) == Some(page) {
                s.run = s.run.saturating_add(1);
            } else {
                s.run = 0;
                (s.next, s.until) = (0, 0); // forget the window
            }
            s.last = page;
        }
        if s.run >= trigger && depth > 0 {
            let start = page.saturating_add(1);
            s.next = s.next.max(start);
            s.until = start.saturating_add(depth as u64);
        }
    }

    /// The slot of `space`'s stream: its own, else a free one, else the least recently used.
    fn stream_slot(&self, space: u64) -> Option<usize> {
        let mine = self.streams.iter().position(|s| s.is_some_and(|s| s.space == space));
        let free = || self.streams.iter().position(|s| s.is_none());
        let lru = || (0..STREAMS).min_by_key(|&i| self.streams[i].map_or(0, |s| s.used));
        mine.or_else(free).or_else(lru)
    }

    /// The next prefetch to issue now, recorded as pending, or `None`. `skip(space, page)`
    /// says whether a page needs no prefetch (cached locally, beyond the end of the file…).
    pub fn poll_prefetch(&mut self, mut skip: impl FnMut(u64, u64) -> bool) -> Option<Prefetch> {
        let depth = self.config.depth as usize;
        for i in 0..STREAMS {
            let Some(mut s) = self.streams[i] else { continue };
            let mut issued = None;
            while s.next < s.until && (s.in_flight as usize) < depth {
                let page = s.next;
                if !skip(s.space, page) && self.pending_id(s.space, page).is_none() {
                    let Some(id) = self.insert(s.space, page, true) else { break };
                    s.in_flight += 1;
                    issued = Some(Prefetch { space: s.space, page, id });
                }
                s.next += 1; // < until: no overflow
                if issued.is_some() {
                    break;
                }
            }
            self.streams[i] = Some(s);
            if issued.is_some() {
                return issued;
            }
        }
        None
    }

    /// The prefetches to issue now (see [`ReadAhead::poll_prefetch`]); each one yielded is
    /// recorded as pending, and dropping the iterator early leaves the rest for later.
    pub fn prefetches<F: FnMut(u64, u64) -> bool>(&mut self, skip: F) -> Prefetches<'_, F, STREAMS, PENDING> {
        Prefetches { ra: self, skip }
    }

    /// A fetch of `page` ended (`ok`: the frame is in the local cache now). Removes the
    /// pending entry and returns it, or `None` if none was pending (late or duplicate). A
    /// failed prefetch resets its stream's detector: the data is not in network memory.
    pub fn complete(&mut self, space: u64, page: u64, ok: bool) -> Option<Completed> {
        if self.pending_count == 0 {
            return None;
        }
        let slot = self.pending.iter_mut().find(|p| p.is_some_and(|p| p.space == space && p.page == page))?;
        let p = slot.take()?;
        self.pending_count -= 1;
        if p.prefetch {
            if let Some(s) = self.streams.iter_mut().flatten().find(|s| s.space == space) {
                s.in_flight = s.in_flight.saturating_sub(1);
                if !ok {
                    s.run = 0;
                    (s.next, s.until) = (0, 0);
                }
            }
        }
        Some(Completed { id: p.id, prefetch: p.prefetch })
    }

    /// The pending fetch of `page`, if any.
    pub fn pending_id(&self, space: u64, page: u64) -> Option<PendingId> {
        if self.pending_count == 0 {
            return None;
        }
        self.pending.iter().flatten().find(|p| p.space == space && p.page == page).map(|p| p.id)
    }

    /// Pages `space`'s stream wants read ahead but [`ReadAhead::poll_prefetch`] has not
    /// handed out yet (a runtime may wait until there are several, to send them together).
    pub fn wanted(&self, space: u64) -> u64 {
        self.streams.iter().flatten().find(|s| s.space == space).map_or(0, |s| s.until.saturating_sub(s.next))
    }

    /// Prefetches of `space` in flight.
    pub fn in_flight(&self, space: u64) -> usize {
        match self.streams.iter().flatten().find(|s| s.space == space) {
            Some(s) => s.in_flight as usize,
            None => self.count_prefetches(space),
        }
    }

    /// Prefetches of `space` in the pending table (a scan).
    fn count_prefetches(&self, space: u64) -> usize {
        if self.pending_count == 0 {
            return 0;
        }
        self.pending.iter().flatten().filter(|p| p.prefetch && p.space == space).count()
    }

    /// Pending fetches (prefetches and recorded reader fetches).
    pub fn pending_len(&self) -> usize {
        self.pending_count
    }

    /// Forget `space`'s detector (the file was closed); its pending fetches stay.
    pub fn forget_stream(&mut self, space: u64) {
        for s in self.streams.iter_mut().filter(|s| s.is_some_and(|s| s.space == space)) {
            *s = None;
        }
    }

    /// Record a pending fetch; `None` if the table is full.
    fn insert(&mut self, space: u64, page: u64, prefetch: bool) -> Option<PendingId> {
        if self.pending_count == PENDING {
            return None;
        }
        let slot = self.pending.iter().position(|p| p.is_none())?;
        // Ids count up, so they are unique until the counter wraps; after that, at most
        // PENDING ids are live, so one of PENDING + 1 candidates is free.
        let mut id = PendingId(self.next_id);
        while self.ids_wrapped && self.pending.iter().flatten().any(|p| p.id == id) {
            id = PendingId(id.0.wrapping_add(1));
        }
        self.next_id = id.0.wrapping_add(1);
        self.ids_wrapped |= self.next_id == 0;
        self.pending[slot] = Some(Pending { space, page, id, prefetch });
        self.pending_count += 1;
        Some(id)
    }
}

/// Iterator over the prefetches to issue now; see [`ReadAhead::prefetches`].
pub struct Prefetches<'a, F, const STREAMS: usize, const PENDING: usize> {
    ra: &'a mut ReadAhead<STREAMS, PENDING>,
    skip: F,
}

impl<F: FnMut(u64, u64) -> bool, const STREAMS: usize, const PENDING: usize> Iterator
    for Prefetches<'_, F, STREAMS, PENDING>
{
    type Item = Prefetch;

    fn next(&mut self) -> Option<Prefetch> {
        self.ra.poll_prefetch(&mut self.skip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_counts_pages_not_handed_out_yet() {
        let mut ra = ReadAhead::<2, 32>::new(Config { trigger: 2, depth: 8 });
        assert_eq!(ra.wanted(1), 0);
        for page in 0..3 {
            if let Decision::Fetch(Some(_)) = ra.on_access(1, page, false) {
                ra.complete(1, page, true);
            }
        }
        // Sequential: pages 3..11 wanted, none handed out.
        assert_eq!(ra.wanted(1), 8);
        let first: [u64; 3] = core::array::from_fn(|_| ra.poll_prefetch(|_, _| false).unwrap().page);
        assert_eq!(first, [3, 4, 5]);
        assert_eq!(ra.wanted(1), 5);
        while ra.poll_prefetch(|_, _| false).is_some() {}
        assert_eq!((ra.wanted(1), ra.in_flight(1)), (0, 8));
        // The reader moves on by one page: one more wanted.
        assert!(matches!(ra.on_access(1, 3, false), Decision::WaitFor(_)));
        ra.complete(1, 3, true);
        assert_eq!(ra.on_access(1, 3, true), Decision::Hit);
        assert_eq!(ra.wanted(1), 1);
        assert_eq!(ra.wanted(2), 0, "another space has no stream");
    }
}
