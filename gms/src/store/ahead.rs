// SPDX-License-Identifier: GPL-2.0-only
//! Read-ahead: after [`TRIGGER`] user reads of consecutive pages, the store reads the next
//! [`StoreConfig::read_ahead`](super::StoreConfig::read_ahead) pages of the volume ahead
//! of the user, into frames of the runtime's ([`super::Data::Scratch`]), as ordinary
//! reads ([`mod@super::read`]: the same replicas, generations and retries; but no second
//! pass, and no failure reported: a read-ahead that finds nothing is dropped).
//!
//! A user read of a page read ahead completes from its frame at once
//! ([`Finished::Copy`]: the runtime copies the frame into the request's page and gives the
//! frame back); one whose read-ahead is still under way takes that read over (its data
//! lands in the read-ahead's frame, and ends as [`Finished::Copy`] too).
//!
//! **Why a copy is never stale.** The store is its volume's one writer. A read-ahead
//! starts only on a page no write is running on, at that page's generation or newer, as
//! any read; a write of a page admitted later drops the page's held copy and marks a
//! read-ahead under way as overwritten (`Fetch::Overwritten`: its data is dropped when
//! it lands, and no user read takes it over). So a copy served was read after the newest
//! acknowledged write of its page was acknowledged, as a read issued then would be.
//!
//! **Bounds.** A read-ahead holds a request slot while it runs and starts only while more
//! than half the slots are free, so user requests are never crowded out; at most
//! `read_ahead` pages are held or under way, and held copies that fall out of the window
//! (the pages after the last user read) are handed back ([`Finished::Scratch`]). With
//! `read_ahead` 0 (the default) nothing here runs.

use super::super::net::storage::Storage;
use super::super::page::Version;
use super::read::ReadReq;
use super::{Fetch, Finished, Owner, Phase, Req, ReqId, Store};
use core::ops::Range;

/// The most pages read ahead (the largest `read_ahead`).
pub const MAX_AHEAD: usize = 32;

/// Consecutive sequential user reads before read-ahead starts.
pub const TRIGGER: u8 = 2;

/// A frame of the read-ahead's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot<F> {
    Free,
    /// Volume page `page` at `version`, in `frame`.
    Held {
        page: u64,
        version: Version,
        frame: F,
    },
    /// A frame to hand back: its copy was overwritten or left the window.
    Drop(F),
}

/// The sequential-read detector and the frames read ahead.
pub(crate) struct Ahead<F> {
    /// The last user read's page, and how many reads in a row were each one past the last.
    last: Option<u64>,
    run: u8,
    /// The window moved or a read-ahead ended since read-aheads were last started.
    due: bool,
    slots: [Slot<F>; MAX_AHEAD],
}

impl<F: Copy> Ahead<F> {
    pub(crate) const fn new() -> Self {
        Ahead { last: None, run: 0, due: false, slots: [Slot::Free; MAX_AHEAD] }
    }

    /// A user read of `page`: one past the last extends the run, anything else restarts it.
    fn seen(&mut self, page: u64) {
        self.run = match self.last {
            Some(l) if l.checked_add(1) == Some(page) => self.run.saturating_add(1),
            _ => 0,
        };
        self.last = Some(page);
        self.due = true;
    }

    /// The pages to read ahead now, `depth` of them: those after the last user read, once
    /// the run is long enough.
    fn window(&self, depth: u8) -> Option<Range<u64>> {
        let last = self.last?;
        (self.run >= TRIGGER && depth > 0).then(|| last.saturating_add(1)..last.saturating_add(1 + u64::from(depth)))
    }

    fn held(&self, page: u64) -> bool {
        self.slots.iter().any(|s| matches!(s, Slot::Held { page: p, .. } if *p == page))
    }

    /// The copy of `page` held, taken out.
    fn take(&mut self, page: u64) -> Option<(Version, F)> {
        let s = self.slots.iter_mut().find(|s| matches!(s, Slot::Held { page: p, .. } if *p == page))?;
        let Slot::Held { version, frame, .. } = core::mem::replace(s, Slot::Free) else { return None };
        Some((version, frame))
    }

    /// Hand back every held copy `keep` refuses.
    fn drop_unless(&mut self, keep: impl Fn(u64) -> bool) {
        for s in self.slots.iter_mut() {
            if let Slot::Held { page, frame, .. } = *s {
                if !keep(page) {
                    *s = Slot::Drop(frame);
                }
            }
        }
    }

    /// Frames held or waiting to be handed back.
    fn used(&self) -> usize {
        self.slots.iter().filter(|s| !matches!(s, Slot::Free)).count()
    }

    /// A frame to hand back, if any.
    pub(crate) fn poll_drop(&mut self) -> Option<F> {
        let s = self.slots.iter_mut().find(|s| matches!(s, Slot::Drop(_)))?;
        match core::mem::replace(s, Slot::Free) {
            Slot::Drop(f) => Some(f),
            _ => None,
        }
    }

    /// Hand back every held copy (the store stops serving).
    pub(crate) fn drop_all(&mut self) {
        self.drop_unless(|_| false);
    }
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// Whether a runtime that hands in user requests in batches (a block request's pages)
    /// should hand in another now. With read-ahead on, user requests stay below half the
    /// slots: read-ahead starts only while more than half are free, and batches would
    /// fill the table first. (A request handed in anyway is taken while a slot is free.)
    pub fn takes_user_request(&self) -> bool {
        let cap = if self.cfg.read_ahead > 0 { (Q / 2).saturating_sub(1) } else { Q };
        self.user_requests() < cap
    }

    /// A user read of `page` admitted into `slot`: the detector sees it; a copy read ahead
    /// serves it at once, a read-ahead under way is taken over. `Err`: neither, `io` back.
    pub(super) fn read_from_ahead(&mut self, slot: usize, page: u64, io: Io) -> Result<ReqId, Io> {
        if self.cfg.read_ahead == 0 {
            return Err(io);
        }
        self.ahead.seen(page);
        if let Some((version, frame)) = self.ahead.take(page) {
            self.stats.ahead_hits += 1;
            self.reqs[slot] = Req::Done(Finished::Copy { io, frame, version });
            return Ok(ReqId(slot as u16));
        }
        let running = self
            .reqs
            .iter()
            .position(|r| matches!(r, Req::Read(r) if r.page == page && matches!(r.io, Owner::Ahead(Fetch::Live))));
        match running {
            Some(j) => {
                if let Req::Read(r) = &mut self.reqs[j] {
                    r.io = Owner::User(io);
                }
                self.stats.ahead_hits += 1;
                Ok(ReqId(j as u16))
            }
            None => Err(io),
        }
    }

    /// A write of `page` was admitted: its copy read ahead is dropped, a read-ahead of it
    /// under way marked overwritten.
    pub(super) fn ahead_overwritten(&mut self, page: u64) {
        self.ahead.drop_unless(|p| p != page);
        for r in self.reqs.iter_mut() {
            if let Req::Read(r) = r {
                if r.page == page && matches!(r.io, Owner::Ahead(_)) {
                    r.io = Owner::Ahead(Fetch::Overwritten);
                }
            }
        }
    }

    /// Start the read-aheads the window wants, within the bounds.
    pub(super) fn start_ahead(&mut self, now: u64) {
        let depth = self.cfg.read_ahead.min(MAX_AHEAD as u8);
        if !core::mem::take(&mut self.ahead.due) || self.phase != Phase::Ready {
            return;
        }
        let Some(window) = self.ahead.window(depth) else { return };
        let keep = window.clone();
        self.ahead.drop_unless(|p| keep.contains(&p));
        // Read-aheads running or held, and request slots free: counted once, then kept
        // up to date as reads start.
        let running = self.reqs.iter().filter(|r| matches!(r, Req::Read(r) if matches!(r.io, Owner::Ahead(_))));
        let mut busy = running.count() + self.ahead.used();
        let mut free = self.reqs.iter().filter(|r| matches!(r, Req::Free)).count();
        for page in window.take_while(|&p| p < self.pages) {
            if busy >= usize::from(depth) || busy >= MAX_AHEAD || free <= Q / 2 {
                break;
            }
            let reading = self.reqs.iter().any(|r| matches!(r, Req::Read(r) if r.page == page));
            if reading
                || self.ahead.held(page)
                || !self.page_free(page, true)
                || !self.is_written(page)
                || self.floor_lost(page)
            {
                continue;
            }
            let Some(slot) = self.reqs.iter().position(|r| matches!(r, Req::Free)) else { break };
            self.reqs[slot] = Req::Read(ReadReq::ahead(page, now));
            self.stats.ahead_reads += 1;
            (busy, free) = (busy + 1, free - 1);
        }
    }

    /// Read-ahead `i` of `page` ended: with its copy at `version` in `frame` (kept, unless
    /// it was overwritten or no slot is free: then `false`, the runtime gives it back), or
    /// with nothing (`None`).
    pub(super) fn ahead_done(&mut self, i: usize, fetch: Fetch, page: u64, got: Option<(Version, F)>) -> bool {
        self.reqs[i] = Req::Free;
        self.ahead.due = true;
        let Some((version, frame)) = got else {
            // Nothing there: the user's reads will find out for themselves.
            self.ahead.run = 0;
            return false;
        };
        let free = self.ahead.slots.iter_mut().find(|s| matches!(s, Slot::Free));
        match (fetch, free) {
            (Fetch::Live, Some(s)) => {
                *s = Slot::Held { page, version, frame };
                true
            }
            _ => false,
        }
    }
}
