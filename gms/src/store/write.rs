// SPDX-License-Identifier: GPL-2.0-only
//! A write: every replica of the page put at once, each to its own member clear of the
//! other replicas' sites ([`super::record`]), each put again on a refusal, a lost answer
//! or another view until the write's window ends; acknowledged when all are stored.
//!
//! Placement keeps clear of every site of the other replicas. When those sites are every
//! member (puts of another replica went unanswered all round), the put waits for them to
//! settle, [`SITE_WAITS`] rounds at most, and then keeps clear of the other replicas'
//! holders and this write's own targets only, rather than never writing the page.

use super::super::epochs::Lru;
use super::super::net::storage::Storage;
use super::super::page::Version;
use super::super::placement::{Outcome as Placed, Via};
use super::super::replica::MAX_REPLICAS;
use super::super::types::{Answer, PutResult};
use super::nodes::{NodeSet, MAX_NODE};
use super::record::{Clock, Replica};
use super::{Data, Issue, IssueKind, Outcome, Owner, Phase, Req, Store, StoreError};

/// Rounds a put waits while every member may hold another replica's newest data.
pub const SITE_WAITS: u8 = 3;

/// One replica's put within a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Put {
    Todo,
    Delayed {
        until: u64,
    },
    InFlight {
        target: u16,
        version: Version,
    },
    Stored {
        target: u16,
    },
    /// Not placed: fewer live members than replicas, and degraded writes are on.
    Skipped,
}

impl Put {
    /// To be put now: not tried yet, or its delay is over.
    fn due(&self, now: u64) -> bool {
        match *self {
            Put::Todo => true,
            Put::Delayed { until } => now >= until,
            _ => false,
        }
    }
}

/// Whether a write waits for its page's floor in the floor map to be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapWait {
    /// Not looked at yet (the volume may still be loading).
    Unchecked,
    /// Map page `m` must be stored at generation `gen` or later before the write is
    /// acknowledged.
    Until { m: u64, gen: u32 },
    /// The bit was set already.
    Clear,
}

pub(crate) struct WriteReq<Io> {
    pub(crate) io: Owner<Io>,
    pub(crate) map: MapWait,
    pub(crate) page: u64,
    deadline: u64,
    puts: [Put; MAX_REPLICAS as usize],
    /// Rounds of refusals or site waits so far.
    rounds: u8,
    /// The write's version: every replica's first put carries it, so that the replicas of
    /// one write share a version; a replica put again takes the next version of the same
    /// generation ([`super::record::Clock::again`]). And each replica's last put version.
    version: Option<Version>,
    last: [Option<Version>; MAX_REPLICAS as usize],
    /// Each replica's targets whose put went unanswered: copies of this write may be
    /// there, which stay sites of the replica once it is stored elsewhere.
    unanswered: [NodeSet; MAX_REPLICAS as usize],
    /// The error that ends the write once its puts in flight are answered.
    failing: Option<StoreError>,
}

impl<Io> WriteReq<Io> {
    pub(crate) fn new(io: Owner<Io>, page: u64, deadline: u64) -> Self {
        let map = if matches!(io, Owner::Meta) { MapWait::Clear } else { MapWait::Unchecked };
        let puts = [Put::Todo; MAX_REPLICAS as usize];
        let last = [None; MAX_REPLICAS as usize];
        let unanswered = [NodeSet::EMPTY; MAX_REPLICAS as usize];
        WriteReq { io, map, page, deadline, puts, rounds: 0, version: None, last, unanswered, failing: None }
    }

    pub(crate) fn wake(&self) -> Option<u64> {
        let delayed = self.puts.iter().filter_map(|p| match *p {
            Put::Delayed { until } => Some(until),
            _ => None,
        });
        delayed.min().map(|t| t.min(self.deadline))
    }

    fn in_flight(&self) -> bool {
        self.puts.iter().any(|p| matches!(p, Put::InFlight { .. }))
    }

    /// Node `n` failed or restarted (`restarted`: its memory is gone): a replica stored
    /// there is to put again.
    pub(crate) fn lost_at(&mut self, n: u16, restarted: bool) {
        for p in self.puts.iter_mut() {
            if *p == (Put::Stored { target: n }) {
                *p = Put::Todo;
            }
        }
        if restarted {
            for u in self.unanswered.iter_mut() {
                u.remove(n);
            }
        }
    }

    fn fail(&mut self, e: StoreError) {
        self.failing.get_or_insert(e);
    }
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// Write `i` of a page never written raises the page's floor beside its puts (nothing
    /// acknowledged can be left below it), and waits for its map page to be stored. Done
    /// as the write is taken once the volume is loaded, so that the writes taken together
    /// go in one map write ([`Self::start_map_writes`]), else at its first put.
    pub(super) fn check_floor(&mut self, i: usize) {
        let Req::Write(w) = &mut self.reqs[i] else { return };
        if w.map != MapWait::Unchecked || self.phase != Phase::Ready {
            return;
        }
        w.map = MapWait::Clear;
        let page = w.page;
        if !self.is_written(page) {
            let v = self.clock.tick();
            let wait = self.raise_floor(page, Clock::generation_start(v));
            if let Req::Write(w) = &mut self.reqs[i] {
                w.version = Some(v);
                w.map = wait.unwrap_or(MapWait::Clear);
            }
        }
    }

    /// The next put write `i` wants sent, if any: a replica that has to wait (delayed,
    /// or left out of a degraded write) lets the next one go now.
    pub(super) fn poll_write(&mut self, i: usize, now: u64, lru: &mut Lru, coord: Option<u16>) -> Option<IssueKind<F>> {
        for _ in 0..self.cfg.replicas {
            // Most calls find every put in flight, stored or waiting: nothing to do.
            if !self.put_due(i, now) {
                return None;
            }
            if let Some(put) = self.poll_put(i, now, lru, coord) {
                return Some(put);
            }
        }
        None
    }

    /// Whether write `i` has a replica to put now.
    fn put_due(&self, i: usize, now: u64) -> bool {
        let Req::Write(w) = &self.reqs[i] else { return false };
        w.failing.is_none() && w.puts[..usize::from(self.cfg.replicas)].iter().any(|p| p.due(now))
    }

    /// The put of write `i`'s first replica to put, if it can go now.
    fn poll_put(&mut self, i: usize, now: u64, lru: &mut Lru, coord: Option<u16>) -> Option<IssueKind<F>> {
        let r = self.cfg.replicas;
        let (page, k, meta) = {
            let Req::Write(w) = &self.reqs[i] else { return None };
            let meta = matches!(w.io, Owner::Meta);
            if w.failing.is_some() || (!meta && self.phase != Phase::Ready) {
                return None;
            }
            self.check_floor(i);
            let Req::Write(w) = &mut self.reqs[i] else { return None };
            for p in w.puts[..usize::from(r)].iter_mut() {
                if p.due(now) {
                    *p = Put::Todo;
                }
            }
            let k = w.puts[..usize::from(r)].iter().position(|p| *p == Put::Todo)? as u8;
            (w.page, k, meta)
        };
        if self.members.len() < usize::from(r) && !self.cfg.degraded_writes {
            self.fail_write(i, StoreError::TooFewMembers, now);
            return None;
        }
        let avoid = self.avoid(i, page, k, now)?;
        let Some((target, via)) = self.kept(i, page, k, avoid, now).or_else(|| {
            let mut list = [0u16; MAX_NODE as usize + 1];
            let n = avoid.iter().zip(list.iter_mut()).map(|(a, l)| *l = a).count();
            self.placement.pick_avoiding(now, lru, coord, &list[..n])
        }) else {
            // Every target clear of the others is at its cap or refused lately.
            self.delay(i, k, now);
            return None;
        };
        match via {
            Via::Plan => self.stats.puts_by_plan += 1,
            Via::Kept => self.stats.puts_kept += 1,
            Via::Fallback => {}
        }
        let (shared, last) = match &self.reqs[i] {
            Req::Write(w) => (w.version, w.last[usize::from(k)]),
            _ => (None, None),
        };
        let version = match (last, shared) {
            (Some(v), _) => self.clock.again(v),
            (None, Some(v)) => v,
            (None, None) => self.clock.tick(),
        };
        if let Req::Write(w) = &mut self.reqs[i] {
            w.puts[usize::from(k)] = Put::InFlight { target, version };
            w.last[usize::from(k)] = Some(version);
            w.version.get_or_insert(version);
        }
        let data = if meta { Data::Meta(page - self.pages) } else { Data::Request };
        Some(IssueKind::Put { page: self.page_id(page, k), version, target, data })
    }

    /// Replica `k`'s holder, if write `i` may put it there again: a live member clear of
    /// `avoid` that this write reached so far and that takes puts. A rewrite in place
    /// leaves no older copy behind ([`super::record`]: strays).
    fn kept(&mut self, i: usize, page: u64, k: u8, avoid: NodeSet, now: u64) -> Option<(u16, Via)> {
        let Req::Write(w) = &self.reqs[i] else { return None };
        let unanswered = w.unanswered[usize::from(k)];
        let h = self.entry(page, k)?.replica.holder()?;
        let ok = self.members.contains(h) && !avoid.contains(h) && !unanswered.contains(h);
        (ok && self.placement.keep(h, now)).then_some((h, Via::Kept))
    }

    /// The members replica `k`'s put keeps clear of (`None`: it waits, or was skipped).
    fn avoid(&mut self, i: usize, page: u64, k: u8, now: u64) -> Option<NodeSet> {
        let Req::Write(w) = &self.reqs[i] else { return None };
        let mut own = NodeSet::EMPTY;
        let mut holders = NodeSet::EMPTY;
        let mut sites = NodeSet::EMPTY;
        for j in (0..self.cfg.replicas).filter(|&j| j != k) {
            if let Put::InFlight { target, .. } | Put::Stored { target } = w.puts[usize::from(j)] {
                own.insert(target);
            }
            if let Some(e) = self.entry(page, j) {
                sites = sites.union(e.sites);
                if let Some(h) = e.replica.holder() {
                    holders.insert(h);
                }
            }
        }
        let all = own.union(sites).union(holders);
        if !self.members.within(all) {
            return Some(all);
        }
        let narrow = own.union(holders);
        let rounds = w.rounds;
        if rounds < SITE_WAITS || self.members.within(narrow) {
            if self.cfg.degraded_writes && self.members.within(own) {
                self.skip(i, page, k, now);
            } else {
                self.delay(i, k, now);
                if let Req::Write(w) = &mut self.reqs[i] {
                    w.rounds += 1;
                }
            }
            return None;
        }
        Some(narrow)
    }

    /// Replica `k` is left out of a degraded write: its older copies are not current any
    /// more (a read asks for a version none of them has) and are strays ([`super::record`]).
    fn skip(&mut self, i: usize, page: u64, k: u8, now: u64) {
        let version = self.clock.tick();
        if let Some(at) = self.at(page, k) {
            let e = &mut self.entries[at];
            (e.strays, e.sites) = (e.strays.union(e.sites), NodeSet::EMPTY);
            e.replica = Replica::Lost { version };
        }
        if let Req::Write(w) = &mut self.reqs[i] {
            w.puts[usize::from(k)] = Put::Skipped;
        }
        self.settle_write(i, now);
    }

    fn delay(&mut self, i: usize, k: u8, now: u64) {
        let until = now.saturating_add(self.cfg.retry_delay_ns);
        if let Req::Write(w) = &mut self.reqs[i] {
            w.puts[usize::from(k)] = Put::Delayed { until };
        }
    }

    fn fail_write(&mut self, i: usize, e: StoreError, now: u64) {
        if let Req::Write(w) = &mut self.reqs[i] {
            w.fail(e);
        }
        self.settle_write(i, now);
    }

    /// A put of write `i`'s replica `k` could not be sent: it goes again after the delay.
    pub(super) fn put_not_sent(&mut self, i: usize, now: u64, issue: &Issue<F>) {
        if let IssueKind::Put { page, .. } = issue.kind {
            let k = self.replica_of(page);
            match &self.reqs[i] {
                Req::Write(_) => self.delay(i, k, now),
                Req::Repair(_) => self.repair_put_not_sent(i, now),
                _ => {}
            }
        }
    }

    /// Write `i`'s put of replica `k` ended with `result` at `now`.
    pub(super) fn write_put_done(&mut self, i: usize, k: u8, result: PutResult, answer: Option<Answer>, now: u64) {
        let Req::Write(w) = &self.reqs[i] else { return };
        let Put::InFlight { target, version } = w.puts[usize::from(k)] else { return };
        let (page, deadline, unanswered) = (w.page, w.deadline, w.unanswered[usize::from(k)]);
        let at = self.at(page, k);
        let next = match result {
            PutResult::Stored { target: t } => {
                self.placement.done(target, Placed::Stored, now);
                if let Some(at) = at {
                    self.entries[at].stored(t, version, answer);
                    self.entries[at].sites = self.entries[at].sites.union(unanswered);
                }
                Put::Stored { target: t }
            }
            PutResult::Refused => {
                self.stats.retries += 1;
                let worth = self.placement.done(target, Placed::Refused, now);
                let full = !worth && self.bump_rounds(i) >= self.cfg.full_after;
                if full {
                    self.fail_write(i, StoreError::NoSpace, now);
                }
                Put::Delayed { until: now.saturating_add(self.cfg.retry_delay_ns) }
            }
            // Busy with an earlier copy of the page (registering it, as a page written
            // again at once finds it, or while its directory is away): no sign of a full
            // cluster or of a target to avoid, so it never counts toward `NoSpace`; asked
            // again after the short busy delay until the write's window ends.
            PutResult::Busy => {
                self.stats.retries += 1;
                self.stats.busy_puts += 1;
                self.placement.done(target, Placed::Busy, now);
                if now >= deadline {
                    self.fail_write(i, StoreError::Unreachable, now);
                }
                Put::Delayed { until: now.saturating_add(self.cfg.busy_delay_ns) }
            }
            PutResult::Failed | PutResult::WrongView => {
                self.stats.retries += 1;
                self.placement.done(target, Placed::Failed, now);
                if let Some(at) = at {
                    self.entries[at].unanswered(target);
                }
                if let Req::Write(w) = &mut self.reqs[i] {
                    w.unanswered[usize::from(k)].insert(target);
                }
                if now >= deadline {
                    self.fail_write(i, StoreError::Unreachable, now);
                }
                let pause = if result == PutResult::Failed { 0 } else { self.cfg.retry_delay_ns };
                Put::Delayed { until: now.saturating_add(pause) }
            }
            PutResult::Superseded => {
                self.placement.done(target, Placed::Failed, now);
                self.fail_write(i, StoreError::Superseded, now);
                self.outrun_older_load(now);
                Put::Todo
            }
        };
        if let Req::Write(w) = &mut self.reqs[i] {
            w.puts[usize::from(k)] = next;
        }
        self.settle_write(i, now);
    }

    fn bump_rounds(&mut self, i: usize) -> u8 {
        match &mut self.reqs[i] {
            Req::Write(w) => {
                w.rounds = w.rounds.saturating_add(1);
                w.rounds
            }
            _ => 0,
        }
    }

    /// Writes past their window with puts still to send fail.
    pub(super) fn write_timeout(&mut self, i: usize, now: u64) {
        let Req::Write(w) = &self.reqs[i] else { return };
        let waiting = w.puts.iter().any(|p| matches!(p, Put::Todo | Put::Delayed { .. }));
        if waiting && now >= w.deadline && w.failing.is_none() {
            self.fail_write(i, StoreError::Unreachable, now);
        }
    }

    /// Finish write `i` if it is done: every replica stored (or skipped) and its map page
    /// stored, or failing with no put in flight.
    pub(super) fn settle_write(&mut self, i: usize, now: u64) {
        let r = usize::from(self.cfg.replicas);
        let Req::Write(w) = &self.reqs[i] else { return };
        if w.in_flight() {
            return;
        }
        if let (MapWait::Until { m, gen }, None) = (w.map, w.failing) {
            if self.map_stored(m) < gen {
                return;
            }
        }
        let outcome = match w.failing {
            Some(e) => Outcome::Failed(e),
            None if w.puts[..r].iter().all(|p| matches!(p, Put::Stored { .. } | Put::Skipped)) => {
                let copies = w.puts[..r].iter().filter(|p| matches!(p, Put::Stored { .. })).count() as u8;
                if !self.past_strays(i) {
                    return;
                }
                Outcome::Written { copies }
            }
            None => return,
        };
        match outcome {
            Outcome::Failed(_) => self.stats.failed_writes += 1,
            Outcome::Written { copies } if usize::from(copies) < r => self.stats.under_replicated += 1,
            _ => {}
        }
        if let Req::Write(w) = core::mem::replace(&mut self.reqs[i], Req::Free) {
            self.finish_req(i, w.io, w.page, outcome, now);
        }
    }

    /// Whether user write `i`, every replica stored, may be acknowledged as far as strays
    /// go ([`super::record`]): none of its page's replicas left older copies behind, or
    /// the page's floor is stored at the write's generation. Else the floor is raised and
    /// the write waits for its map page.
    fn past_strays(&mut self, i: usize) -> bool {
        let Req::Write(w) = &self.reqs[i] else { return true };
        let (page, version) = (w.page, w.version);
        let Some(floor) = version.filter(|_| matches!(w.io, Owner::User(_))).map(Clock::generation_start) else {
            return true;
        };
        let r = self.cfg.replicas;
        if (0..r).all(|k| self.entry(page, k).is_none_or(|e| e.strays.is_empty())) {
            return true;
        }
        if let Some(wait) = self.raise_floor(page, floor) {
            if let Req::Write(w) = &mut self.reqs[i] {
                w.map = wait;
            }
            return false;
        }
        // The floor is at the write or above and stored (the map wait passed): the
        // older copies are strays a reload never takes.
        for k in 0..r {
            if let Some(at) = self.at(page, k) {
                self.entries[at].strays = NodeSet::EMPTY;
            }
        }
        true
    }
}
