// SPDX-License-Identifier: GPL-2.0-only
//! Reads of nearby pages asked together: when a user's read is about to ask the member
//! that holds its replica, the other user reads ready to ask that same member for the
//! same replica of pages within [`GETPAGES_SPAN`] join it, up to
//! [`StoreConfig::group_pages`](super::StoreConfig::group_pages) ([`GETPAGES_MAX`] at
//! most) in all, and go as one `GETPAGES` ([`crate::getpages`]): one round
//! trip, its reply scattered into the reads' own pages, which the runtime arms as one
//! reply target ([`super::drive::Frames::group`]).
//!
//! Only reads that would ask the holder straight away join: a user's read into its own
//! page, on its first pass and first try of a replica the store recorded as held (at a
//! known version) by a live member. Reads of pages an earlier load wrote (replicas
//! `Unknown`: a survey comes first), meta pages, read-aheads (their frames are the
//! store's) and every retry stay page by page. The store is these pages' one writer, so
//! the holder's copy at the recorded generation or newer is the page's newest, as for a
//! hinted getpage.
//!
//! A hit ends every read of the group. Anything else — a miss (the holder lacks one of
//! the pages), no answer, a refusal, a payload of the wrong length — sends each read back
//! to the page-by-page path from where it was ([`mod@super::read`]: the same holder first,
//! then the other sites, the directory, retries), never to a group again. So does a group
//! the runtime could not arm or send.

use super::super::net::storage::Storage;
use super::super::ops::{GETPAGES_MAX, GETPAGES_SPAN};
use super::super::page::{PageId, Version};
use super::super::types::GetResult;
use super::record::{Clock, Replica};
use super::{Data, IssueKind, Outcome, Req, ReqId, Route, Store};

/// The reads of one `GETPAGES`: replica `k` of volume pages `first + bit` for each bit of
/// `mask` (bit 0 always), in the mask's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The first page's replica as a GMS page.
    pub first: PageId,
    pub mask: u64,
    /// The member that holds every one of them.
    pub holder: u16,
    known: [Version; GETPAGES_MAX],
    reads: [ReqId; GETPAGES_MAX],
}

impl Group {
    /// Pages (and reads) in the group: 2 to [`GETPAGES_MAX`].
    pub fn len(&self) -> usize {
        self.mask.count_ones() as usize
    }

    /// Never: a group has two reads or more.
    pub fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// The version each page is asked at or newer (its recorded write's generation).
    pub fn known(&self) -> &[Version] {
        &self.known[..self.len()]
    }

    /// The reads, in page order.
    pub fn reads(&self) -> &[ReqId] {
        &self.reads[..self.len()]
    }
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// Read `i` is about to send `get`: with the reads that can join it, a `GETPAGES`
    /// instead (each read then waits for it); else `get` as it was. The group starts at
    /// the lowest page of those within [`GETPAGES_SPAN`] below read `i`'s, and takes the
    /// lowest pages from there.
    pub(super) fn poll_group(&mut self, i: usize, get: IssueKind<F>, now: u64) -> IssueKind<F> {
        let IssueKind::Get { route: Route::Holder { node: holder, .. }, into: Data::Request, .. } = get else {
            return get;
        };
        let most = usize::from(self.cfg.group_pages).min(GETPAGES_MAX);
        let Some((k, page)) = self.group_lead(i, now).filter(|_| most > 1) else { return get };
        let Some(known) = self.groupable_page(page, k, holder) else { return get };
        let others = || self.joiners(i, k, holder, known, now);
        let base = others().map(|(p, ..)| p).filter(|&p| p < page && page - p < GETPAGES_SPAN).fold(page, u64::min);
        // (page, slot, known) of each read, read `i`'s first, then the lowest others.
        let mut picked = [(page, i, known); GETPAGES_MAX];
        let mut n = 1;
        for (p, j, v) in others().filter(|&(p, ..)| p >= base && p - base < GETPAGES_SPAN) {
            if picked[..n].iter().any(|x| x.0 == p) {
                continue;
            }
            if n < most {
                picked[n] = (p, j, v);
                n += 1;
            } else if let Some(x) = picked[1..n].iter_mut().filter(|x| x.0 > p).max_by_key(|x| x.0) {
                *x = (p, j, v);
            }
        }
        if n < 2 {
            return get;
        }
        picked[..n].sort_unstable_by_key(|x| x.0);
        let first = self.page_id(base, k);
        let mask = picked[..n].iter().fold(0u64, |m, x| m | 1 << (x.0 - base));
        let mut g = Group { first, mask, holder, known: [known; GETPAGES_MAX], reads: [ReqId(0); GETPAGES_MAX] };
        for (x, &(_, j, v)) in picked[..n].iter().enumerate() {
            (g.known[x], g.reads[x]) = (v, ReqId(j as u16));
            if let Req::Read(r) = &mut self.reqs[j] {
                r.join(i as u16);
            }
        }
        IssueKind::Gets(g)
    }

    /// The reads other than `i` ready to ask `holder` for replica `k` that may go in a
    /// group with read `i` (asked at `known`): (page, slot, version to ask at).
    fn joiners(
        &self,
        i: usize,
        k: u8,
        holder: u16,
        known: Version,
        now: u64,
    ) -> impl Iterator<Item = (u64, usize, Version)> + '_ {
        // Versions go on the wire as offsets from the oldest (32 bits).
        let near = move |v: Version| v.0.abs_diff(known.0) <= u64::from(u32::MAX / 2);
        (0..self.reqs.len()).filter(move |&j| j != i).filter_map(move |j| {
            let Req::Read(r) = &self.reqs[j] else { return None };
            let v = r.groupable(false, now).filter(|&x| x == k).and_then(|_| self.groupable_page(r.page, k, holder));
            v.filter(|&v| near(v)).map(|v| (r.page, j, v))
        })
    }

    /// The replica read `i` asks its holder for and its page, if it may lead a group.
    fn group_lead(&self, i: usize, now: u64) -> Option<(u8, u64)> {
        let Req::Read(r) = &self.reqs[i] else { return None };
        r.groupable(true, now).map(|k| (k, r.page))
    }

    /// The version to ask replica `k` of volume page `page` at, if a read of it may go in
    /// a group to `holder`: a written page of this load (no replica unknown) whose
    /// replica `k` the store recorded as held by `holder`, a live member.
    fn groupable_page(&self, page: u64, k: u8, holder: u16) -> Option<Version> {
        if page >= self.pages || !self.is_written(page) || !self.members.contains(holder) {
            return None;
        }
        let replicas = (0..self.cfg.replicas).filter_map(|x| self.entry(page, x));
        if replicas.clone().any(|e| e.replica == Replica::Unknown) {
            return None;
        }
        match self.entry(page, k)?.replica {
            Replica::Held { version, holder: h, .. } if h == holder => Some(Clock::generation_start(version)),
            _ => None,
        }
    }

    /// The reads in read `lead`'s group, by slot.
    fn members_of(&self, lead: usize) -> impl Iterator<Item = usize> + '_ {
        let lead = Some(lead as u16);
        (0..self.reqs.len()).filter(move |&j| matches!(&self.reqs[j], Req::Read(r) if r.lead() == lead))
    }

    /// Read `lead`'s `GETPAGES` ended with `result`: a hit of every page ends each read
    /// (at its recorded version: the holder had that write or a newer one of the same
    /// generation); anything else sends each back to be read alone.
    pub(super) fn group_done(&mut self, lead: usize, result: &GetResult<F>, now: u64) {
        let n = self.members_of(lead).count() as u64;
        let whole = |len: u32| u64::from(len) == n * u64::from(self.cfg.page_bytes);
        let hit = match *result {
            GetResult::Hit { version, len, .. } if whole(len) => Some(version),
            _ => None,
        };
        if hit.is_none() {
            self.stats.group_misses += 1;
        }
        for j in 0..self.reqs.len() {
            let Req::Read(r) = &mut self.reqs[j] else { continue };
            if r.lead() != Some(lead as u16) {
                continue;
            }
            let Some(oldest) = hit else {
                r.alone(now);
                continue;
            };
            let (page, k) = (r.page, r.k);
            let version = self.entry(page, k).and_then(|e| e.replica.version()).map_or(oldest, |v| v.max(oldest));
            if let Req::Read(r) = core::mem::replace(&mut self.reqs[j], Req::Free) {
                self.finish_req(j, r.io, r.page, Outcome::Read { version }, now);
            }
        }
    }

    /// Read `lead`'s `GETPAGES` could not go: its reads go alone, now.
    pub(super) fn group_not_sent(&mut self, lead: usize, now: u64) {
        for j in 0..self.reqs.len() {
            if let Req::Read(r) = &mut self.reqs[j] {
                if r.lead() == Some(lead as u16) {
                    r.alone(now);
                }
            }
        }
    }
}
