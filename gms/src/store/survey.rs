// SPDX-License-Identifier: GPL-2.0-only
//! The survey: the first read of a page an earlier load wrote (its replicas `Unknown`)
//! asks every member for every such replica before it reads, and takes the newest copy
//! found at the page's floor or newer ([`super::volume`]) as the page's.
//!
//! Why every member: right after a reload the directories may not know the copies yet
//! (their nodes re-register them as views settle). Why every replica: one replica's
//! newest copy may have died, and a member may still hold a superseded copy of it (a
//! member declared failed while it ran kept its memory and was never told to drop it).
//! Such a *stray* is older than the page's floor: a write that left one behind raised the
//! floor past it before it was acknowledged ([`super::record`]). The replicas of the last
//! acknowledged write all carry its generation or a newer one ([`super::record::Clock`]:
//! a write's copies share a generation, whatever their puts again), so the newest
//! generation found at the floor or newer is that write or a newer one. A replica whose
//! best copy is of an older generation is recorded lost at the newest: never read, and
//! made again by re-replication, which starts at once. Its sites are the members that may
//! hold a copy the survey did not see — one that did not answer, one declared failed
//! since the load began (it may only be suspected) — so a read asks them once they are
//! heard again, and until then ends `Unreachable`, not `Lost`. The label is the exception: an
//! older label is still the volume's (a newer claim whose copies died never reached
//! `Ready`, or the epochs it used are skipped: the load claims one above every label
//! copy it saw). Nothing found anywhere: the
//! replicas stay unknown and the read asks their directories, as it would.

//! A *sweep* is the same round for a page whose copies the store knew of but nobody has
//! any more, before a read calls it lost: every member is asked for every replica at its
//! recorded write or newer (the label: any copy, as every read of it asks), and a copy
//! found is recorded where it is.

use super::super::net::storage::Storage;
use super::super::page::Version;
use super::super::types::{GetResult, MissReason};
use super::nodes::NodeSet;
use super::record::{Clock, Replica, RETRY_BITS};
use super::{Data, IssueKind, Req, Route, Store};

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// The oldest copy of `page` a get may take: of the replica's recorded write's
    /// generation or newer, else (none recorded) at the page's floor or newer — an older
    /// one is a stray. The label: any copy (an older label is still the volume's).
    pub(super) fn at_least(&self, page: u64, recorded: Option<Version>) -> Version {
        match recorded.filter(|_| page != self.pages) {
            Some(v) => Clock::generation_start(v),
            None => self.floor(page).max(Version(1)),
        }
    }

    /// Whether a copy of `page` at `v` found by a survey or sweep is the replica's whose
    /// write was recorded at `of`: of its generation or newer; the label, any copy.
    fn is_copy_of(&self, page: u64, v: Version, of: Version) -> bool {
        page == self.pages || Clock::generation(v) >= Clock::generation(of)
    }

    /// The next probe of read `i`'s survey of `page`, if it has one to make; resolves the
    /// survey once every probe is answered.
    pub(super) fn poll_survey(&mut self, i: usize, page: u64, into: Data<F>, now: u64) -> Option<IssueKind<F>> {
        let Req::Read(r) = &self.reqs[i] else { return None };
        if r.survey.done {
            return None;
        }
        let sweep = r.survey.sweep;
        let wanted = |j: u8| {
            self.entry(page, j).is_some_and(|e| match e.replica {
                Replica::Unknown => true,
                Replica::Held { .. } | Replica::Lost { .. } => sweep,
                Replica::Unwritten => false,
            })
        };
        let (mut from, mut asked) = (r.survey.replica, r.survey.asked);
        let (replica, node) = loop {
            let Some(replica) = (from..self.cfg.replicas).find(|&j| wanted(j)) else {
                self.resolve_survey(i, page, now);
                return None;
            };
            // The next member not asked yet (a member that joins meanwhile is asked too).
            match self.members.iter().find(|&m| !asked.contains(m)) {
                Some(node) => break (replica, node),
                None => (from, asked) = (replica + 1, NodeSet::EMPTY),
            }
        };
        if let Req::Read(r) = &mut self.reqs[i] {
            (r.survey.replica, r.survey.asked) = (replica, asked);
            r.probing(replica, node);
        }
        let route = Route::Holder { node, answer: None };
        // A sweep wants the recorded write or a newer one; a survey, any copy at the
        // page's floor or newer.
        let at_least = self.at_least(page, self.entry(page, replica).and_then(|e| e.replica.version()));
        Some(IssueKind::Get { page: self.page_id(page, replica), at_least, route, into })
    }

    /// Read `i`'s probe of `node` for `replica` ended.
    pub(super) fn survey_done(&mut self, i: usize, replica: u8, node: u16, result: &GetResult<F>, now: u64) {
        let Req::Read(r) = &mut self.reqs[i] else { return };
        let s = &mut r.survey;
        match (result, s.best.get_mut(usize::from(replica))) {
            (GetResult::Hit { version, .. }, Some(best)) => {
                if best.is_none_or(|(v, _)| *version > v) {
                    *best = Some((*version, node));
                }
            }
            (GetResult::Miss { reason: MissReason::NotCached, .. }, _) => {}
            // No answer: what that member holds is unknown.
            _ => s.unanswered.insert(node),
        }
        s.asked.insert(node);
        r.ready(now);
    }

    /// Every probe of read `i`'s survey of `page` is in: record what it found.
    fn resolve_survey(&mut self, i: usize, page: u64, now: u64) {
        let Req::Read(r) = &mut self.reqs[i] else { return };
        r.survey.done = true;
        let best = r.survey.best;
        // Members that may hold a copy nobody saw: one that did not answer, and one
        // declared failed (not asked) that may only be suspected.
        let unseen = r.survey.unanswered.union(self.departed);
        let known = (0..self.cfg.replicas).filter_map(|k| self.entry(page, k)).filter_map(|e| e.replica.version());
        let found = best.iter().flatten().map(|(v, _)| *v);
        let Some(newest) = known.chain(found).max() else { return };
        let generation = Clock::generation(newest);
        let mut short = false;
        for k in 0..self.cfg.replicas {
            let Some(at) = self.at(page, k) else { continue };
            let found = best[usize::from(k)];
            match self.entries[at].replica {
                Replica::Unknown => {}
                // A sweep found a copy of the recorded write (or a newer one).
                Replica::Held { version, .. } | Replica::Lost { version } => {
                    if let Some((v, holder)) = found.filter(|&(v, _)| self.is_copy_of(page, v, version)) {
                        self.entries[at].stored(holder, v, None);
                    }
                    continue;
                }
                Replica::Unwritten => continue,
            }
            // Of the newest write (no copy found is newer), or any label: the load claims an
            // epoch above every one it saw ([`super::volume`]).
            match found {
                Some((v, holder)) if self.is_copy_of(page, v, newest) => self.entries[at].stored(holder, v, None),
                _ => {
                    let base = Version(generation << RETRY_BITS);
                    self.entries[at].replica = Replica::Lost { version: base };
                    // They are its sites: reads ask them once they are members again.
                    self.entries[at].sites = self.entries[at].sites.union(unseen);
                    short = true;
                }
            }
        }
        // The newest copy has fewer replicas than it should: make them again now.
        if short {
            self.repair.start(now);
        }
    }
}
