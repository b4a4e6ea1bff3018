// SPDX-License-Identifier: GPL-2.0-only
//! The GMS operations the store waits for: each one's request and the frame lent to it,
//! from [`Store::handle_issued`] to its completion ([`Store::handle_put`],
//! [`Store::handle_get`]), which goes to the request's state machine.
//!
//! A node reuses an operation's slot once the operation ended, possibly before the runtime
//! hands its completion in (completions wait in the host until it settles them): a slot's
//! previous record is kept aside ([`Store`]'s `ended`) until its completion comes.

use super::super::net::storage::Storage;
use super::super::page::PageId;
use super::super::types::{Answer, GetResult, OpId, PutResult};
use super::{Finished, Issue, IssueKind, OpRec, Owner, Req, ReqId, Store};

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// `issue` was sent as operation `op` (`Some`), or could not be sent (`None`: no
    /// operation slot or frame now; it goes again after the retry delay, or fails).
    pub fn handle_issued(&mut self, now: u64, issue: &Issue<F>, op: Option<OpId>) {
        self.handle_issued_with(now, issue, op, None)
    }

    /// [`Self::handle_issued`], `lent` the request's frame the operation holds (given back
    /// when it completes: [`Self::op_frame`]).
    pub fn handle_issued_with(&mut self, now: u64, issue: &Issue<F>, op: Option<OpId>, lent: Option<F>) {
        match op {
            Some(op) => {
                if let Some(s) = self.ops.get_mut(usize::from(op.slot)) {
                    if let Some(prev) = s.replace(OpRec { op, req: issue.req, lent }) {
                        if let Some(e) = self.ended.iter_mut().find(|e| e.is_none()) {
                            *e = Some(prev);
                        }
                    }
                }
                match issue.kind {
                    IssueKind::Put { .. } => self.stats.puts += 1,
                    IssueKind::Get { .. } => self.stats.gets += 1,
                    IssueKind::Top { .. } => self.stats.top_asks += 1,
                    IssueKind::Gets(g) => {
                        self.stats.gets += 1;
                        self.stats.group_gets += 1;
                        self.stats.group_reads += g.len() as u64;
                    }
                }
            }
            None => self.not_sent(now, issue),
        }
    }

    pub(super) fn not_sent(&mut self, now: u64, issue: &Issue<F>) {
        let i = usize::from(issue.req.0);
        match (&issue.kind, self.reqs.get(i)) {
            (IssueKind::Put { target, .. }, _) => {
                // The node would not send to it (not a member in its view, no slot): the
                // target is skipped for a while, as one that refused.
                self.placement.done(*target, super::super::placement::Outcome::Refused, now);
                self.put_not_sent(i, now, issue);
            }
            (IssueKind::Get { .. }, Some(Req::Read(_))) => self.get_not_sent(i, now),
            (IssueKind::Get { .. }, Some(Req::Repair(_))) => self.repair_ended(i, false),
            (IssueKind::Top { .. }, Some(Req::Top(_))) => self.top_unanswered(i, now),
            (IssueKind::Gets(_), _) => self.group_not_sent(i, now),
            _ => {}
        }
    }

    /// The request behind GMS operation `op`, forgotten (its completion arrived).
    pub(super) fn take_op(&mut self, op: OpId) -> Option<usize> {
        let slot = self.ops.get_mut(usize::from(op.slot)).into_iter();
        let r = slot.chain(self.ended.iter_mut()).find(|r| r.is_some_and(|r| r.op == op))?.take()?;
        Some(usize::from(r.req.0))
    }

    /// The record of `op`, if it is this store's.
    pub(crate) fn op_rec(&self, op: OpId) -> Option<&OpRec<F>> {
        let slot = self.ops.get(usize::from(op.slot)).into_iter();
        slot.chain(self.ended.iter()).flatten().find(|r| r.op == op)
    }

    /// Whether `op` is this store's (`Some`), and the request frame lent to it.
    pub fn op_frame(&self, op: OpId) -> Option<Option<F>> {
        self.op_rec(op).map(|r| r.lent)
    }

    /// The GMS operations the store waits for, and their requests.
    pub fn ops_in_flight(&self) -> impl Iterator<Item = (OpId, ReqId)> + '_ {
        self.ops.iter().chain(self.ended.iter()).flatten().map(|r| (r.op, r.req))
    }

    /// The requests under way: (slot, what, page); for a runtime's status and tests.
    /// Whether re-replication has work: a scan under way or a repair running.
    pub fn repair_pending(&self) -> bool {
        self.repair.wake().is_some() || self.reqs.iter().any(|r| matches!(r, Req::Repair(_)))
    }

    /// User requests held (running, or finished and not handed back).
    pub fn user_requests(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| match r {
                Req::Write(w) => matches!(w.io, Owner::User(_)),
                Req::Read(r) => matches!(r.io, Owner::User(_)),
                Req::Done(f) => matches!(f, Finished::Request { .. }),
                _ => false,
            })
            .count()
    }

    pub fn requests(&self) -> impl Iterator<Item = (usize, &'static str, u64)> + '_ {
        self.reqs.iter().enumerate().filter_map(|(i, r)| match r {
            Req::Write(w) => Some((i, if matches!(w.io, Owner::Meta) { "meta write" } else { "write" }, w.page)),
            Req::Read(r) => Some((
                i,
                match r.io {
                    Owner::Meta => "meta read",
                    Owner::Ahead(_) => "read ahead",
                    Owner::User(_) => "read",
                },
                r.page,
            )),
            Req::Repair(r) => Some((i, "repair", r.page)),
            _ => None,
        })
    }

    /// Which replica GMS page `page` of this volume is.
    pub(super) fn replica_of(&self, page: PageId) -> u8 {
        ((page.space ^ self.space) >> 60) as u8
    }

    /// A put this store issued ended (its completion, or `Failed` when the runtime knows
    /// it never will): `answer` is where the target's NIC answers reads of the copy.
    pub fn handle_put(&mut self, now: u64, op: OpId, page: PageId, result: PutResult, answer: Option<Answer>) {
        let Some(i) = self.take_op(op) else { return };
        match self.reqs[i] {
            Req::Write(_) => self.write_put_done(i, self.replica_of(page), result, answer, now),
            Req::Repair(_) => self.repair_put_done(i, result, answer, now),
            _ => {}
        }
    }

    /// A getpage this store issued ended. Returns whether the store keeps the hit's frame
    /// (a re-replication's copy or a read-ahead's, handed back later as
    /// [`super::Finished::Scratch`] or [`super::Finished::Copy`]); every other frame stays
    /// the runtime's.
    pub fn handle_get(&mut self, now: u64, op: OpId, result: &GetResult<F>) -> bool {
        self.get_done(now, op, result, None)
    }

    fn get_done(&mut self, now: u64, op: OpId, result: &GetResult<F>, bytes: Option<&[u8]>) -> bool {
        let Some(i) = self.take_op(op) else { return false };
        match &self.reqs[i] {
            Req::Read(r) if r.lead() == Some(i as u16) => {
                self.group_done(i, result, now);
                false
            }
            Req::Read(_) => self.read_get_done(i, result, now, bytes),
            Req::Repair(_) => self.repair_get_done(i, result, now),
            _ => false,
        }
    }

    /// [`Self::handle_get`] with the bytes of a hit's frame, which the store asked for
    /// ([`Self::wants_bytes`]: a meta page).
    pub fn handle_get_bytes(&mut self, now: u64, op: OpId, result: &GetResult<F>, bytes: &[u8]) -> bool {
        self.get_done(now, op, result, Some(bytes))
    }
}
