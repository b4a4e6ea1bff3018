// SPDX-License-Identifier: GPL-2.0-only
//! Re-replication: after a member fails or restarts, every replica it held is made again
//! from a surviving replica — fetched from that replica's holder into a frame of the
//! runtime's, then put to a member clear of the page's other sites, at the copy's own
//! version (the next of its generation if the replica's directory keeps that one), so
//! that the replicas of one write keep sharing a generation ([`super::record::Clock`]).
//!
//! A scan walks the volume from page 0 (its meta pages included) and starts a repair for each page with a lost
//! replica and a held one whose holder is a member, at most
//! [`super::StoreConfig::repair_in_flight`] at a time and one every
//! [`super::StoreConfig::repair_gap_ns`], and only while a quarter of the request slots
//! stay free for users. A page a user request is working on is skipped and the scan runs
//! again after it ends. A page with no replica left cannot be repaired: its reads fail.

use super::super::epochs::Lru;
use super::super::net::storage::Storage;
use super::super::page::Version;
use super::super::placement::Outcome as Placed;
use super::super::types::{Answer, GetResult, PutResult};
use super::nodes::{NodeSet, MAX_NODE};
use super::record::{Clock, Replica};
use super::{Data, Finished, IssueKind, Req, Route, Store};

/// Pages one call looks at, at most (bounds the time a call takes on a large volume).
const SCAN_BUDGET: u64 = 4096;
/// Tries of a repair's put before it is left to the next scan.
const PUT_TRIES: u8 = 3;

/// The scan.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Repair {
    /// Where the scan goes on (`None`: no failure since it ended).
    cursor: Option<u64>,
    /// A page was skipped (busy): scan again when this pass ends.
    again: bool,
    next_start: u64,
    /// Lost replicas this pass met and did not make again.
    met: u64,
}

impl Repair {
    pub(crate) const NEW: Repair = Repair { cursor: None, again: false, next_start: 0, met: 0 };

    /// A member failed: scan the volume (again) from the start.
    pub(crate) fn start(&mut self, now: u64) {
        self.cursor = Some(0);
        self.next_start = self.next_start.min(now);
    }

    pub(crate) fn wake(&self) -> Option<u64> {
        self.cursor.map(|_| self.next_start)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step<F> {
    Fetch,
    Fetching,
    /// The copy is in `frame`; its put goes from `not_before`, at `version` (the copy's
    /// own, so that the replicas of one write keep sharing a version; `None`: a new one,
    /// after the directory refused that one).
    Put {
        frame: F,
        tries: u8,
        not_before: u64,
        version: Option<Version>,
    },
    Putting {
        frame: F,
        tries: u8,
        target: u16,
        version: Version,
    },
}

pub(crate) struct RepairReq<F> {
    pub(crate) page: u64,
    /// The replica to make again, and the one it is copied from.
    lost: u8,
    from: u8,
    step: Step<F>,
}

impl<F> RepairReq<F> {
    pub(crate) fn wake(&self) -> Option<u64> {
        match self.step {
            Step::Put { not_before, .. } => Some(not_before),
            _ => None,
        }
    }
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// Start the repairs the scan finds, within the bounds.
    pub(super) fn start_repairs(&mut self, now: u64) {
        let Some(mut p) = self.repair.cursor else { return };
        let running = self.reqs.iter().filter(|r| matches!(r, Req::Repair(_))).count();
        let free = self.reqs.iter().filter(|r| matches!(r, Req::Free)).count();
        if running >= usize::from(self.cfg.repair_in_flight) || now < self.repair.next_start || free * 4 < Q {
            return;
        }
        // The volume's meta pages (its label and floor map) too: past the user's.
        let all = self.pages.saturating_add(self.meta);
        let end = p.saturating_add(SCAN_BUDGET).min(all);
        while p < end {
            if let Some((lost, from)) = self.repairable(p) {
                if !self.page_free(p, true) {
                    self.repair.again = true;
                    self.repair.met += 1;
                } else if let Some(slot) = self.free_slot() {
                    self.reqs[slot] = Req::Repair(RepairReq { page: p, lost, from, step: Step::Fetch });
                    self.repair.cursor = Some(p + 1);
                    self.repair.next_start = now.saturating_add(self.cfg.repair_gap_ns);
                    return;
                }
            } else if self.lost_replica(p).is_some() {
                // No live copy to make it from.
                self.repair.met += 1;
            }
            p += 1;
        }
        if p >= all {
            self.stats.repair_passes += 1;
            self.stats.repair_short = core::mem::take(&mut self.repair.met);
        }
        self.repair.cursor = if p < all {
            Some(p)
        } else if core::mem::take(&mut self.repair.again) {
            self.repair.next_start = now.saturating_add(self.cfg.retry_delay_ns);
            Some(0)
        } else {
            None
        };
    }

    /// A lost replica of `page`, a held one of its write or a newer one to copy it from,
    /// and a member to put it on (one clear of every site of the page's other replicas),
    /// if it has all three.
    fn repairable(&self, page: u64) -> Option<(u8, u8)> {
        let r = self.cfg.replicas;
        let lost = self.lost_replica(page)?;
        let want = self.entry(page, lost).and_then(|e| e.replica.version()).map_or(0, Clock::generation);
        let from = (0..r).find(|&k| {
            self.entry(page, k).is_some_and(|e| match e.replica {
                Replica::Held { version, holder, .. } => {
                    self.members.contains(holder) && Clock::generation(version) >= want
                }
                _ => false,
            })
        })?;
        (!self.members.within(self.repair_avoid(page, lost))).then_some((lost, from))
    }

    /// The members a copy of replica `lost` of `page` keeps clear of: every site of the
    /// other replicas (each may hold that replica's newest data); when those are every
    /// member, only the other replicas' holders (as a write does after waiting, in
    /// [`super::write`]: a copy on a member that may also hold a stale copy of another
    /// replica beats no copy).
    fn repair_avoid(&self, page: u64, lost: u8) -> NodeSet {
        let (mut sites, mut holders) = (NodeSet::EMPTY, NodeSet::EMPTY);
        for e in (0..self.cfg.replicas).filter(|&k| k != lost).filter_map(|k| self.entry(page, k)) {
            sites = sites.union(e.sites);
            if let Some(h) = e.replica.holder() {
                holders.insert(h);
            }
        }
        if self.members.within(sites) {
            holders
        } else {
            sites
        }
    }

    /// A replica of `page` whose copy is lost.
    fn lost_replica(&self, page: u64) -> Option<u8> {
        (0..self.cfg.replicas).find(|&k| self.entry(page, k).is_some_and(|e| matches!(e.replica, Replica::Lost { .. })))
    }

    /// The next operation repair `i` wants sent, if any.
    pub(super) fn poll_repair(
        &mut self,
        i: usize,
        now: u64,
        lru: &mut Lru,
        coord: Option<u16>,
    ) -> Option<IssueKind<F>> {
        let Req::Repair(r) = &self.reqs[i] else { return None };
        let (page, lost, from) = (r.page, r.lost, r.from);
        match r.step {
            Step::Fetch => {
                let Some(Replica::Held { version, holder, answer }) = self.entry(page, from).map(|e| e.replica) else {
                    self.repair_ended(i, false);
                    return None;
                };
                if let Req::Repair(r) = &mut self.reqs[i] {
                    r.step = Step::Fetching;
                }
                let route = Route::Holder { node: holder, answer: answer.filter(|_| self.cfg.nic_answers) };
                Some(IssueKind::Get { page: self.page_id(page, from), at_least: version, route, into: Data::Scratch })
            }
            Step::Put { frame, tries, not_before, version } if now >= not_before => {
                let avoid = self.repair_avoid(page, lost);
                let mut list = [0u16; MAX_NODE as usize + 1];
                let n = avoid.iter().zip(list.iter_mut()).map(|(a, l)| *l = a).count();
                let Some((target, _)) = self.placement.pick_avoiding(now, lru, coord, &list[..n]) else {
                    self.repair_retry(i, frame, tries, now, version);
                    return None;
                };
                let version = version.unwrap_or_else(|| self.clock.tick());
                if let Req::Repair(r) = &mut self.reqs[i] {
                    r.step = Step::Putting { frame, tries, target, version };
                }
                Some(IssueKind::Put { page: self.page_id(page, lost), version, target, data: Data::Frame(frame) })
            }
            _ => None,
        }
    }

    fn repair_retry(&mut self, i: usize, frame: F, tries: u8, now: u64, version: Option<Version>) {
        if tries + 1 >= PUT_TRIES {
            self.repair_ended(i, false);
            return;
        }
        let not_before = now.saturating_add(self.cfg.retry_delay_ns);
        if let Req::Repair(r) = &mut self.reqs[i] {
            r.step = Step::Put { frame, tries: tries + 1, not_before, version };
        }
    }

    pub(super) fn repair_put_not_sent(&mut self, i: usize, now: u64) {
        if let Req::Repair(RepairReq { step: Step::Putting { frame, tries, target, version }, .. }) = self.reqs[i] {
            self.placement.done(target, Placed::Failed, now);
            self.repair_retry(i, frame, tries, now, Some(version));
        }
    }

    /// Repair `i`'s fetch ended: the copy is in the frame of a hit. Returns whether the
    /// store keeps the frame (else the runtime's).
    pub(super) fn repair_get_done(&mut self, i: usize, result: &GetResult<F>, now: u64) -> bool {
        match *result {
            GetResult::Hit { frame, version, .. } => {
                let Req::Repair(r) = &self.reqs[i] else { return false };
                // Not below the version recorded for the replica made again (its
                // directory may keep that one as a floor); and never an older write's
                // data under it: a copy of an older generation cannot make it again.
                let floor = self.entry(r.page, r.lost).and_then(|e| e.replica.version());
                if floor.is_some_and(|f| Clock::generation(f) > Clock::generation(version)) {
                    self.repair_ended(i, false);
                    return false;
                }
                let version = Some(floor.map_or(version, |f| f.max(version)));
                if let Req::Repair(r) = &mut self.reqs[i] {
                    r.step = Step::Put { frame, tries: 0, not_before: now, version };
                }
                true
            }
            GetResult::Miss { .. } => {
                self.repair_ended(i, false);
                false
            }
        }
    }

    /// Repair `i`'s put ended.
    pub(super) fn repair_put_done(&mut self, i: usize, result: PutResult, answer: Option<Answer>, now: u64) {
        let Req::Repair(RepairReq { page, lost, step: Step::Putting { frame, tries, target, version }, .. }) =
            self.reqs[i]
        else {
            return;
        };
        match result {
            PutResult::Stored { target: t } => {
                self.placement.done(target, Placed::Stored, now);
                if let Some(at) = self.at(page, lost) {
                    self.entries[at].stored(t, version, answer);
                }
                self.stats.repaired += 1;
                self.repair_ended(i, true);
            }
            PutResult::Refused | PutResult::Busy => {
                self.placement.done(target, Placed::Refused, now);
                self.repair_retry(i, frame, tries, now, Some(version));
            }
            // The directory keeps this version of the replica already: the next one.
            PutResult::Superseded => {
                self.placement.done(target, Placed::Failed, now);
                let again = self.clock.again(version);
                self.repair_retry(i, frame, tries, now, Some(again));
            }
            PutResult::Failed | PutResult::WrongView => {
                self.placement.done(target, Placed::Failed, now);
                if let Some(at) = self.at(page, lost) {
                    self.entries[at].unanswered(target);
                }
                self.repair_retry(i, frame, tries, now, Some(version));
            }
        }
    }

    /// Repair `i` is over (`done`: the replica was made again); its frame goes back. One
    /// that failed leaves its page to the next scan.
    pub(super) fn repair_ended(&mut self, i: usize, done: bool) {
        let Req::Repair(r) = &self.reqs[i] else { return };
        let frame = match r.step {
            Step::Put { frame, .. } | Step::Putting { frame, .. } => Some(frame),
            _ => None,
        };
        if !done {
            self.repair.again = true;
            self.repair.met += 1;
            if self.repair.cursor.is_none() {
                self.repair.cursor = Some(self.pages.saturating_add(self.meta));
            }
        }
        match frame {
            Some(f) => self.finish(i, Finished::Scratch(f)),
            None => self.reqs[i] = Req::Free,
        }
    }
}
