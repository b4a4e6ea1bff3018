// SPDX-License-Identifier: GPL-2.0-only
//! A read: replica 0 first, then the next while one misses, each asked of the member
//! the store knows holds it (two messages; its NIC answers by itself when the put's
//! `PUTDONE` named an answer entry), then of its other sites (a put of the same write
//! whose answer was lost may have left a copy there), and of the page's directory node
//! when none has such a copy; always at the replica's generation or newer (any copy of
//! that write, [`super::record::Clock`]), so a stale copy is a miss, never data.
//!
//! A getpage that got no answer is tried again, [`super::StoreConfig::read_tries`] times,
//! before the read moves on. When every replica missed while a member that may hold
//! the newest data is still alive (its copy may be registering with a new directory
//! node after a membership change), the read makes another pass after the retry delay,
//! [`super::StoreConfig::read_passes`] passes in all. A page never written reads as
//! zeros without the network. A written page no read found is asked of every member once
//! more before the read fails (a *sweep*, [`super::survey`]: GMS may have moved a copy
//! where the store never heard, while a site it knows of is away). It fails with
//! [`StoreError::Lost`] when every member asked for a copy it may hold answered that it
//! has none, else
//! with [`StoreError::Unreachable`] (one did not answer, a site of it is a member
//! declared failed that may be heard again, or a member was heard again during the last
//! pass: it may hold a copy that pass looked for while it was away).

use super::super::net::storage::Storage;
use super::super::page::Version;
use super::super::replica::MAX_REPLICAS;
use super::super::types::{GetResult, MissReason};
use super::nodes::NodeSet;
use super::record::{Entry, Replica};
use super::{Data, Fetch, Finished, IssueKind, Outcome, Owner, Phase, Req, Route, Store, StoreError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Ask replica `k` from `not_before`: its holder or a site not asked yet, else its
    /// directory.
    Ready { not_before: u64 },
    /// A getpage of replica `k` from member `from`, or its directory (`None`).
    InFlight { from: Option<u16> },
    /// A probe of `node` for replica `replica` in the survey ([`super::survey`]).
    Probing { replica: u8, node: u16 },
    /// One of the reads of a `GETPAGES` whose operation is read `lead`'s
    /// ([`super::group`]).
    Grouped { lead: u16 },
}

/// Where a read's data lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lands {
    /// In the request's own page (a user's read), or the runtime's meta frame.
    Request,
    /// In a frame of the runtime's the store keeps ([`super::ahead`]).
    Scratch,
}

pub(crate) struct ReadReq<Io> {
    pub(crate) io: Owner<Io>,
    pub(crate) page: u64,
    lands: Lands,
    pub(super) k: u8,
    /// The members asked for replica `k` that have no copy of it.
    asked: NodeSet,
    tries: u8,
    pass: u8,
    /// A member asked in this pass for a copy it may hold never answered: that nothing
    /// was found proves nothing.
    silent: bool,
    /// Every member was asked for the page ([`Survey::sweep`]) before it is called lost.
    swept: bool,
    /// Read page by page from now on: its `GETPAGES` group got no hit, or could not go.
    solo: bool,
    pub(super) survey: Survey,
    step: Step,
}

/// A read's survey so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Survey {
    /// The replica being asked for, and the members asked for it so far.
    pub(super) replica: u8,
    pub(super) asked: NodeSet,
    /// The newest copy of each replica found: (version, member).
    pub(super) best: [Option<(Version, u16)>; MAX_REPLICAS as usize],
    pub(super) done: bool,
    /// The members that did not answer their probe: that nothing was found there proves
    /// nothing.
    pub(super) unanswered: NodeSet,
    /// Every written replica is asked for, not only the unknown ones: the read found no
    /// copy where the store knew of one, and GMS may have moved one where it never heard.
    pub(super) sweep: bool,
}

impl<Io> ReadReq<Io> {
    /// Waiting for a survey's probe of `node` for `replica`.
    pub(super) fn probing(&mut self, replica: u8, node: u16) {
        self.step = Step::Probing { replica, node };
    }

    /// A member was heard again with its memory: it may hold a copy this pass looked for
    /// while it was away, so this pass's misses prove nothing ([`Store::handle_member`]).
    pub(super) fn member_back(&mut self) {
        self.silent = true;
    }

    /// Ready to go on from `now`.
    pub(super) fn ready(&mut self, now: u64) {
        self.step = Step::Ready { not_before: now };
    }

    /// On to replica `k` (or the end of the pass), from `now`.
    fn replica(&mut self, k: u8, now: u64) {
        (self.k, self.asked, self.tries) = (k, NodeSet::EMPTY, 0);
        self.ready(now);
    }

    pub(crate) fn new(io: Owner<Io>, page: u64, now: u64) -> Self {
        let step = Step::Ready { not_before: now };
        let (asked, survey) = (NodeSet::EMPTY, Survey::default());
        ReadReq {
            io,
            page,
            lands: Lands::Request,
            k: 0,
            asked,
            tries: 0,
            pass: 0,
            silent: false,
            swept: false,
            solo: false,
            survey,
            step,
        }
    }

    /// A read-ahead of `page` ([`super::ahead`]), from `now`.
    pub(crate) fn ahead(page: u64, now: u64) -> Self {
        ReadReq { lands: Lands::Scratch, ..Self::new(Owner::Ahead(Fetch::Live), page, now) }
    }

    /// Where a getpage of this read lands, volume of `pages` pages.
    pub(super) fn into<F>(&self, pages: u64) -> Data<F> {
        match (&self.io, self.lands) {
            (Owner::Meta, _) => Data::Meta(self.page - pages),
            (_, Lands::Scratch) => Data::Scratch,
            (_, Lands::Request) => Data::Request,
        }
    }

    pub(crate) fn wake(&self) -> Option<u64> {
        match self.step {
            Step::Ready { not_before, .. } => Some(not_before),
            Step::InFlight { .. } | Step::Probing { .. } | Step::Grouped { .. } => None,
        }
    }

    /// The replica a user's read into its own page asks its holder for first, if it may
    /// go in a `GETPAGES` group ([`super::group`]): its first pass, first try of that
    /// replica, no member asked and no survey or sweep under way; `sent` whether the read
    /// was just handed its getpage (the group's first read), else it must be ready `now`.
    pub(super) fn groupable(&self, sent: bool, now: u64) -> Option<u8> {
        let fresh = self.tries == 0 && self.pass == 0 && self.asked.is_empty() && !self.swept && !self.solo;
        let user = matches!(self.io, Owner::User(_)) && self.lands == Lands::Request && !self.survey.sweep;
        let step = match self.step {
            Step::InFlight { from: Some(_) } => sent,
            Step::Ready { not_before } => !sent && not_before <= now,
            _ => false,
        };
        (fresh && user && step).then_some(self.k)
    }

    /// In the `GETPAGES` group of read `lead`.
    pub(super) fn join(&mut self, lead: u16) {
        self.step = Step::Grouped { lead };
    }

    /// The read whose `GETPAGES` this read is in, if any.
    pub(super) fn lead(&self) -> Option<u16> {
        match self.step {
            Step::Grouped { lead } => Some(lead),
            _ => None,
        }
    }

    /// Its group got no hit (or never went): read alone from `now`, as if just admitted.
    pub(super) fn alone(&mut self, now: u64) {
        self.solo = true;
        self.ready(now);
    }
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// The getpage read `i` wants sent, if any.
    pub(super) fn poll_read(&mut self, i: usize, now: u64) -> Option<IssueKind<F>> {
        let Req::Read(r) = &self.reqs[i] else { return None };
        let Step::Ready { not_before } = r.step else { return None };
        let (meta, asked, into) = (matches!(r.io, Owner::Meta), r.asked, r.into(self.pages));
        if now < not_before || (!meta && self.phase != Phase::Ready) {
            return None;
        }
        let (page, mut k) = (r.page, r.k);
        if !meta && (!self.is_written(page) || self.floor_lost(page)) {
            self.end_pass(i, now);
            return None;
        }
        if let Some(probe) = self.poll_survey(i, page, into, now) {
            return Some(probe);
        }
        while k < self.cfg.replicas {
            let Some(e) = self.entry(page, k).copied() else {
                k += 1;
                continue;
            };
            let (at_least, route) = match e.replica {
                Replica::Unwritten => {
                    k += 1;
                    continue;
                }
                // A copy of the recorded write or newer (of the label, any copy).
                Replica::Held { version, .. } | Replica::Lost { version } => {
                    (self.at_least(page, Some(version)), self.source(&e, asked))
                }
                // Nothing found of it on any member: its directory may know (a copy at
                // its floor or newer: an older one is a stray).
                Replica::Unknown => (self.at_least(page, None), Route::Directory),
            };
            if let Req::Read(r) = &mut self.reqs[i] {
                if r.k != k {
                    r.replica(k, now);
                }
                let from = match route {
                    Route::Holder { node, .. } => Some(node),
                    Route::Directory => None,
                };
                r.step = Step::InFlight { from };
            }
            return Some(IssueKind::Get { page: self.page_id(page, k), at_least, route, into });
        }
        self.end_pass(i, now);
        None
    }

    /// Where to ask next for a replica recorded in `e`, `asked` having no copy: its
    /// holder, then its other sites that are members (one only suspected may still hold
    /// it), then its directory.
    fn source(&self, e: &Entry, asked: NodeSet) -> Route {
        if !self.cfg.direct_reads {
            return Route::Directory;
        }
        if let Replica::Held { holder, answer, .. } = e.replica {
            if self.members.contains(holder) && !asked.contains(holder) {
                return Route::Holder { node: holder, answer: answer.filter(|_| self.cfg.nic_answers) };
            }
        }
        let mut others = e.sites.intersect(self.members).iter().filter(|&n| !asked.contains(n));
        others.next().map_or(Route::Directory, |node| Route::Holder { node, answer: None })
    }

    /// Every replica of read `i` was tried: zeros if none was ever written, another pass
    /// if a site of the newest data is alive, else the page is lost.
    fn end_pass(&mut self, i: usize, now: u64) {
        let Req::Read(r) = &self.reqs[i] else { return };
        if let Owner::Ahead(fetch) = r.io {
            self.ahead_done(i, fetch, r.page, None);
            return;
        }
        let (page, pass) = (r.page, r.pass);
        let written = page >= self.pages || self.is_written(page);
        let entries = || (0..self.cfg.replicas).filter_map(|k| self.entry(page, k));
        // A site of the newest data still a member: its copy may be registering anew.
        let alive = entries().any(|e| {
            !e.sites.intersect(self.members).is_empty() || e.replica.holder().is_some_and(|h| self.members.contains(h))
        });
        // Copies an earlier load left are somewhere unknown: worth the passes too.
        let unknown = entries().any(|e| e.replica == Replica::Unknown);
        // A site of it is a member declared failed that may be heard again (where copies
        // an earlier load left are is unknown: any such member may hold one).
        let departed = entries().any(|e| {
            let sites = if e.replica == Replica::Unknown { NodeSet::ALL } else { e.sites };
            !sites.intersect(self.departed).is_empty()
        });
        // A member asked did not answer, or refused this node as outside its view (this
        // node may be suspected, and admitted again): nothing is proven yet.
        let silent = matches!(&self.reqs[i], Req::Read(r) if r.silent || !r.survey.unanswered.is_empty());
        let outcome = if !written {
            self.stats.zero_reads += 1;
            Outcome::Zero
        } else if page < self.pages && self.floor_lost(page) {
            // Which copy is the page's is lost with its map page ([`super::volume`]).
            self.stats.failed_reads += 1;
            Outcome::Failed(StoreError::Lost)
        } else if (alive || unknown || departed || silent) && pass + 1 < self.cfg.read_passes {
            if let Req::Read(r) = &mut self.reqs[i] {
                r.pass += 1;
                r.silent = false;
                r.replica(0, now.saturating_add(self.cfg.retry_delay_ns));
                // Copies an earlier load left are looked for again: the members may have
                // changed (one heard again after a suspicion is asked too).
                r.survey = Survey::default();
            }
            return;
        } else if matches!(&self.reqs[i], Req::Read(r) if !r.swept) {
            // Before failing, every member is asked for every replica: GMS may have moved
            // a copy to a live member no record names, while a recorded site is away.
            if let Req::Read(r) = &mut self.reqs[i] {
                r.swept = true;
                r.survey = Survey { sweep: true, ..Survey::default() };
                r.replica(0, now);
            }
            return;
        } else {
            self.stats.failed_reads += 1;
            // Lost only when every member that could hold a copy answered, in the last
            // pass, that it has none (a live site among them: its copy did not come back),
            // and no member had one.
            let unsure = departed || silent;
            Outcome::Failed(if unsure { StoreError::Unreachable } else { StoreError::Lost })
        };
        if let Req::Read(r) = core::mem::replace(&mut self.reqs[i], Req::Free) {
            self.finish_req(i, r.io, r.page, outcome, now);
        }
    }

    /// Read `i`'s getpage could not be sent (the node refused it: no operation slot, or the
    /// member is not one in its view): the next site or the directory is asked instead of
    /// a member, and a replica whose directory cannot be asked at all counts as tried.
    pub(super) fn get_not_sent(&mut self, i: usize, now: u64) {
        let later = now.saturating_add(self.cfg.retry_delay_ns);
        let tries = self.cfg.read_tries;
        if let Req::Read(r) = &mut self.reqs[i] {
            match r.step {
                Step::InFlight { from: Some(node) } => {
                    r.asked.insert(node);
                    r.silent = true;
                    r.ready(later);
                }
                Step::InFlight { from: None } => {
                    r.tries += 1;
                    if r.tries >= tries {
                        r.replica(r.k + 1, later);
                    } else {
                        r.ready(later);
                    }
                }
                // A probe not sent: what that member holds is unknown.
                Step::Probing { node, .. } => {
                    r.survey.asked.insert(node);
                    r.survey.unanswered.insert(node);
                    r.ready(later);
                }
                Step::Ready { .. } | Step::Grouped { .. } => {}
            }
        }
    }

    /// Read `i`'s getpage ended with `result` at `now`; `bytes`: a meta page's hit.
    /// Returns whether the store keeps the hit's frame (one it landed in: [`Lands::Scratch`]).
    pub(super) fn read_get_done(&mut self, i: usize, result: &GetResult<F>, now: u64, bytes: Option<&[u8]>) -> bool {
        let Req::Read(r) = &self.reqs[i] else { return false };
        let from = match r.step {
            Step::InFlight { from } => from,
            Step::Probing { replica, node } => {
                self.survey_done(i, replica, node, result, now);
                return false;
            }
            Step::Ready { .. } | Step::Grouped { .. } => return false,
        };
        let tries = self.cfg.read_tries;
        let Req::Read(r) = &mut self.reqs[i] else { return false };
        match *result {
            GetResult::Hit { version, frame, .. } => {
                let Req::Read(r) = core::mem::replace(&mut self.reqs[i], Req::Free) else { return false };
                // A meta page read while a member asked did not answer: a newer copy may be
                // there, and a map page older than a write known of is looked for again.
                if matches!(r.io, Owner::Meta) && (r.silent || !r.survey.unanswered.is_empty()) {
                    self.map_again = false;
                }
                return match (r.io, r.lands) {
                    (Owner::Ahead(fetch), _) => self.ahead_done(i, fetch, r.page, Some((version, frame))),
                    (Owner::User(io), Lands::Scratch) => {
                        self.finish(i, Finished::Copy { io, frame, version });
                        true
                    }
                    (io, _) => {
                        if let (Owner::Meta, Some(b)) = (&io, bytes) {
                            self.meta_read(r.page - self.pages, b);
                        }
                        self.finish_req(i, io, r.page, Outcome::Read { version }, now);
                        false
                    }
                };
            }
            GetResult::Miss { reason, .. } => {
                let failed = matches!(reason, MissReason::Failed(_) | MissReason::Malformed);
                if failed {
                    r.tries += 1;
                    r.silent |= from.is_some() && r.tries >= tries;
                }
                // Not a member in its view: no answer, and none until this node is again.
                r.silent |= reason == MissReason::Refused;
                match from {
                    // Asked again, until it has answered or its tries are spent.
                    _ if failed && r.tries < tries => r.ready(now),
                    // No such copy there (or no answer): another site or the directory.
                    Some(node) => {
                        r.asked.insert(node);
                        r.tries = 0;
                        r.ready(now);
                    }
                    None => r.replica(r.k + 1, now),
                }
            }
        }
        self.stats.fallbacks += 1;
        false
    }
}
