// SPDX-License-Identifier: GPL-2.0-only
//! A read: replica 0 first, then the next while one misses, each asked of the member
//! the store knows holds it (two messages; its NIC answers by itself when the put's
//! `PUTDONE` named an answer entry), and of the page's directory node when that member
//! has no such copy; always at the replica's recorded version or newer, so a stale copy
//! is a miss, never data.
//!
//! A getpage that got no answer is tried again, [`super::StoreConfig::read_tries`] times,
//! before the read moves on. When every replica missed while a member that may hold
//! the newest data is still alive (its copy may be registering with a new directory
//! node after a membership change), the read makes another pass after the retry delay,
//! [`super::StoreConfig::read_passes`] passes in all. A page never written reads as
//! zeros without the network; a written page whose every copy is gone fails with
//! [`StoreError::Lost`].

use super::super::net::storage::Storage;
use super::super::page::Version;
use super::super::replica::MAX_REPLICAS;
use super::super::types::{GetResult, MissReason};
use super::nodes::NodeSet;
use super::record::Replica;
use super::{Data, IssueKind, Outcome, Owner, Phase, Req, Route, Store, StoreError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Ask replica `k` (of the directory only, once its holder missed) from `not_before`.
    Ready {
        via_directory: bool,
        not_before: u64,
    },
    InFlight {
        via_directory: bool,
    },
    /// A probe of `node` for replica `replica` in the survey ([`super::survey`]).
    Probing {
        replica: u8,
        node: u16,
    },
}

pub(crate) struct ReadReq<Io> {
    pub(crate) io: Owner<Io>,
    pub(crate) page: u64,
    k: u8,
    tries: u8,
    pass: u8,
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
    /// A member did not answer its probe: that nothing was found proves nothing.
    pub(super) unanswered: bool,
}

impl<Io> ReadReq<Io> {
    /// Waiting for a survey's probe of `node` for `replica`.
    pub(super) fn probing(&mut self, replica: u8, node: u16) {
        self.step = Step::Probing { replica, node };
    }

    /// Ready to go on from `now`.
    pub(super) fn ready(&mut self, now: u64) {
        self.step = Step::Ready { via_directory: false, not_before: now };
    }

    pub(crate) fn new(io: Owner<Io>, page: u64, now: u64) -> Self {
        let step = Step::Ready { via_directory: false, not_before: now };
        ReadReq { io, page, k: 0, tries: 0, pass: 0, survey: Survey::default(), step }
    }

    pub(crate) fn wake(&self) -> Option<u64> {
        match self.step {
            Step::Ready { not_before, .. } => Some(not_before),
            Step::InFlight { .. } | Step::Probing { .. } => None,
        }
    }
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// The getpage read `i` wants sent, if any.
    pub(super) fn poll_read(&mut self, i: usize, now: u64) -> Option<IssueKind<F>> {
        let Req::Read(r) = &self.reqs[i] else { return None };
        let Step::Ready { via_directory, not_before } = r.step else { return None };
        let meta = matches!(r.io, Owner::Meta);
        if now < not_before || (!meta && self.phase != Phase::Ready) {
            return None;
        }
        let (page, mut k) = (r.page, r.k);
        if !meta && !self.is_written(page) {
            self.end_pass(i, now);
            return None;
        }
        if let Some(probe) = self.poll_survey(i, page, meta, now) {
            return Some(probe);
        }
        while k < self.cfg.replicas {
            let replica = self.entry(page, k).map_or(Replica::Unwritten, |e| e.replica);
            let (at_least, route) = match replica {
                Replica::Unwritten => {
                    k += 1;
                    continue;
                }
                Replica::Held { version, holder, answer }
                    if !via_directory && self.cfg.direct_reads && self.members.contains(holder) =>
                {
                    (version, Route::Holder { node: holder, answer: answer.filter(|_| self.cfg.nic_answers) })
                }
                // A site that is a member again (it was only suspected) may still hold it.
                Replica::Lost { version } if !via_directory && self.cfg.direct_reads => {
                    match self.entry(page, k).and_then(|e| e.sites.intersect(self.members).iter().next()) {
                        Some(node) => (version, Route::Holder { node, answer: None }),
                        None => (version, Route::Directory),
                    }
                }
                Replica::Held { version, .. } | Replica::Lost { version } => (version, Route::Directory),
                // Nothing found of it on any member: its directory may know.
                Replica::Unknown => (Version(1), Route::Directory),
            };
            if let Req::Read(r) = &mut self.reqs[i] {
                r.k = k;
                r.step = Step::InFlight { via_directory: route == Route::Directory };
            }
            let into = if meta { Data::Meta(page - self.pages) } else { Data::Request };
            return Some(IssueKind::Get { page: self.page_id(page, k), at_least, route, into });
        }
        self.end_pass(i, now);
        None
    }

    /// Every replica of read `i` was tried: zeros if none was ever written, another pass
    /// if a site of the newest data is alive, else the page is lost.
    fn end_pass(&mut self, i: usize, now: u64) {
        let Req::Read(r) = &self.reqs[i] else { return };
        let (page, pass) = (r.page, r.pass);
        let written = page >= self.pages || self.is_written(page);
        let entries = || (0..self.cfg.replicas).filter_map(|k| self.entry(page, k));
        // A site of the newest data still a member: its copy may be registering anew.
        let alive = entries().any(|e| {
            !e.sites.intersect(self.members).is_empty() || e.replica.holder().is_some_and(|h| self.members.contains(h))
        });
        // Copies an earlier load left are somewhere unknown: worth the passes too.
        let unknown = entries().any(|e| e.replica == Replica::Unknown);
        // A site of it is a member declared failed that may be heard again.
        let departed = entries().any(|e| !e.sites.intersect(self.departed).is_empty());
        let unanswered = matches!(&self.reqs[i], Req::Read(r) if r.survey.unanswered);
        let outcome = if !written {
            self.stats.zero_reads += 1;
            Outcome::Zero
        } else if (alive || unknown || departed) && pass + 1 < self.cfg.read_passes {
            if let Req::Read(r) = &mut self.reqs[i] {
                r.pass += 1;
                r.k = 0;
                r.tries = 0;
                // Copies an earlier load left are looked for again: the members may have
                // changed (one heard again after a suspicion is asked too).
                r.survey = Survey::default();
                r.step = Step::Ready { via_directory: false, not_before: now.saturating_add(self.cfg.retry_delay_ns) };
            }
            return;
        } else {
            self.stats.failed_reads += 1;
            // Lost only when every member that could hold a copy answered that it has none.
            let unsure = alive || departed || unanswered;
            Outcome::Failed(if unsure { StoreError::Unreachable } else { StoreError::Lost })
        };
        if let Req::Read(r) = core::mem::replace(&mut self.reqs[i], Req::Free) {
            self.finish_req(i, r.io, r.page, outcome, now);
        }
    }

    /// Read `i`'s getpage could not be sent (the node refused it: no operation slot, or the
    /// holder is not a member in its view): the directory is asked instead of a holder,
    /// and a replica that cannot be asked at all counts as tried.
    pub(super) fn get_not_sent(&mut self, i: usize, now: u64) {
        let delay = self.cfg.retry_delay_ns;
        let tries = self.cfg.read_tries;
        if let Req::Read(r) = &mut self.reqs[i] {
            if let Step::InFlight { .. } = r.step {
                r.tries += 1;
                if r.tries >= tries {
                    r.k += 1;
                    r.tries = 0;
                }
                r.step = Step::Ready { via_directory: true, not_before: now.saturating_add(delay) };
            }
        }
    }

    /// Read `i`'s getpage ended with `result` at `now`; `bytes`: a meta page's hit.
    pub(super) fn read_get_done(&mut self, i: usize, result: &GetResult<F>, now: u64, bytes: Option<&[u8]>) {
        let Req::Read(r) = &self.reqs[i] else { return };
        let via_directory = match r.step {
            Step::InFlight { via_directory } => via_directory,
            Step::Probing { replica, node } => return self.survey_done(i, replica, node, result, now),
            Step::Ready { .. } => return,
        };
        let Req::Read(r) = &mut self.reqs[i] else { return };
        let next = |r: &mut ReadReq<Io>| {
            r.k += 1;
            r.tries = 0;
            Step::Ready { via_directory: false, not_before: now }
        };
        r.step = match *result {
            GetResult::Hit { version, .. } => {
                if let Req::Read(r) = core::mem::replace(&mut self.reqs[i], Req::Free) {
                    if let (Owner::Meta, Some(b)) = (&r.io, bytes) {
                        self.meta_read(r.page - self.pages, b);
                    }
                    self.finish_req(i, r.io, r.page, Outcome::Read { version }, now);
                }
                return;
            }
            // The holder has no such copy: its directory may know where it went.
            GetResult::Miss { reason: MissReason::NotCached, .. } if !via_directory => {
                Step::Ready { via_directory: true, not_before: now }
            }
            GetResult::Miss { reason: MissReason::NotCached | MissReason::NoDirectory, .. } => next(r),
            GetResult::Miss { reason: MissReason::Failed(_) | MissReason::Malformed, .. } => {
                r.tries += 1;
                if r.tries < self.cfg.read_tries {
                    Step::Ready { via_directory, not_before: now }
                } else {
                    next(r)
                }
            }
        };
        self.stats.fallbacks += 1;
    }
}
