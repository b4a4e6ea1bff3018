// SPDX-License-Identifier: GPL-2.0-only
//! A node's pending work: the client operation slots and the background directory tasks.

use super::directory::{Named, NO_SITE};
use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{GmsNode, Host};
use super::ops::{PutDone, PutStatus};
use super::page::{PageId, Version};
use super::slots::*;
use super::types::*;

impl<
        F: Copy + PartialEq,
        H: Host<F>,
        S: Storage,
        const MEMBERS: usize,
        const OPS: usize,
        const TASKS: usize,
        const OUTQ: usize,
    > GmsNode<F, H, S, MEMBERS, OPS, TASKS, OUTQ>
{
    pub(super) fn op_id(&self, i: usize) -> OpId {
        OpId { slot: i as u16, generation: self.ops[i].generation }
    }

    pub(super) fn alloc_op(
        &mut self,
        kind: OpKind,
        mode: Mode,
        page: PageId,
        version: Version,
    ) -> Result<usize, GmsError> {
        let start = self.op_hint % OPS;
        let i = (start..OPS).chain(0..start).find(|&i| self.ops[i].state == OpState::Free).ok_or(GmsError::OpsFull)?;
        self.op_hint = i + 1;
        let deadline = self.now.saturating_add(self.cfg.op_timeout);
        self.ops_deadline = self.ops_deadline.min(deadline);
        let o = &mut self.ops[i];
        o.state = OpState::InFlight;
        o.kind = kind;
        o.mode = mode;
        o.page = page;
        o.version = version;
        o.dst = NO_SITE;
        o.view = self.members.view();
        o.moving = false;
        o.group = None;
        o.call = None;
        o.deadline = deadline;
        o.timed_out = false;
        o.done = None;
        Ok(i)
    }

    pub(super) fn free_op(&mut self, i: usize) {
        let o = &mut self.ops[i];
        o.state = OpState::Free;
        o.generation = o.generation.wrapping_add(1).max(1);
        o.call = None;
        o.done = None;
    }

    /// Finish operation `i` exactly once: hand the result to the host (nonblocking) or
    /// park it for `take` (wait).
    pub(super) fn finish(&mut self, i: usize, result: OpResult<F>) {
        self.finish_with(i, result, None);
    }

    /// [`Self::finish`], a put's completion naming where its target's NIC answers.
    pub(super) fn finish_with(&mut self, i: usize, result: OpResult<F>, answer: Option<Answer>) {
        let o = self.ops[i];
        if o.state != OpState::InFlight {
            return;
        }
        let done = Completion { op: self.op_id(i), page: o.page, result, answer };
        match o.mode {
            Mode::NonBlocking => {
                self.free_op(i);
                self.host.completed(done);
            }
            Mode::Wait => {
                self.ops[i].state = OpState::Done;
                self.ops[i].call = None;
                self.ops[i].done = Some(done);
                // Cannot overflow: one event per slot until it is taken.
                let _ = self.events.push(done.op);
            }
        }
    }

    /// Finish operation `i` as failed (no reply will come).
    pub(super) fn fail_op(&mut self, i: usize, e: RpcError) {
        let result = match self.ops[i].kind {
            OpKind::Get => {
                // A `GETPAGES` counted a get for each of its pages.
                self.stats.get_failures += self.ops[i].pages();
                OpResult::Get(GetResult::Miss { reason: MissReason::Failed(e), frame: None })
            }
            OpKind::Put | OpKind::Move => OpResult::Put(PutResult::Failed),
            OpKind::Discard => OpResult::Discard(DiscardResult::Failed),
            OpKind::Top => OpResult::Top(TopResult::Failed),
        };
        self.finish(i, result);
    }

    /// Queue a one-way `PUTDONE`.
    pub(super) fn notify(&mut self, to: Option<(u16, OpId)>, page: PageId, version: Version, status: PutStatus) {
        let Some((dst, tag)) = to else { return };
        // A stored copy tells the putter where this node's NIC answers for it.
        let held = self.held.get(&page).filter(|h| status == PutStatus::Stored && h.version == version);
        let done = PutDone { page, version, tag, status, site: self.id, answer: held.and_then(|h| h.answer) };
        if self.outq.push(Notice { dst, done }).is_err() {
            self.stats.outq_overflow += 1;
        }
    }

    pub(super) fn free_task(&self) -> Option<usize> {
        self.tasks.iter().position(|t| t.state == TaskState::Free)
    }

    /// Queue background work (merged with the same work already queued). `false` if the
    /// table is full.
    pub(super) fn queue_task(
        &mut self,
        kind: TaskKind,
        page: PageId,
        version: Version,
        seq: u64,
        site: u16,
        notify: Option<(u16, OpId)>,
    ) -> bool {
        let same = |t: &Task| t.live() && t.kind == kind && t.page == page && t.site == site;
        if let Some(t) = self.tasks.iter_mut().find(|t| same(t)) {
            // A registration is for the copy held now; removals and drops cover the
            // newest version (and identity) asked for.
            if kind == TaskKind::Register || (version, seq) > (t.version, t.seq) {
                (t.version, t.seq) = (version, seq);
            }
            t.withdrawn = false;
            if notify.is_some() {
                t.notify = notify;
            }
            return true;
        }
        let Some(i) = self.free_task() else {
            self.stats.task_overflow += 1;
            return false;
        };
        let now = self.now;
        self.tasks_idle = false;
        let t = &mut self.tasks[i];
        t.state = TaskState::Due(now);
        t.kind = kind;
        t.page = page;
        t.version = version;
        t.seq = seq;
        t.sent = version;
        t.sent_seq = seq;
        t.site = site;
        t.notify = notify;
        t.attempts = 0;
        t.withdrawn = false;
        t.then = None;
        t.gave_up = false;
        true
    }

    /// Ask `named`'s site whether it holds the copy the directory just named it for, which
    /// displaced `then` (or leapt): the displaced copy is dropped once it does (see
    /// [`super::directory`]'s module doc). `false` if the table is full.
    pub(super) fn queue_confirm(&mut self, page: PageId, named: Named, then: Option<Named>) -> bool {
        let (site, version, seq) = named;
        if !self.queue_task(TaskKind::Confirm, page, version, seq, site, None) {
            return false;
        }
        if let Some(i) = self.confirming(&page, site) {
            // A registration merged with an earlier one's: it asks about the newer.
            (self.tasks[i].version, self.tasks[i].seq) = (version, seq);
            self.tasks[i].then = then;
        }
        true
    }

    /// The live confirmation of `site`'s copy of `page`, if any.
    pub(super) fn confirming(&self, page: &PageId, site: u16) -> Option<usize> {
        self.tasks.iter().position(|t| t.live() && t.kind == TaskKind::Confirm && t.page == *page && t.site == site)
    }

    /// Have the displaced copy `(site, version, seq)` of `page` dropped (here, or by a
    /// `DROPPAGE`).
    pub(super) fn displaced_dropped(&mut self, page: PageId, (site, version, seq): Named) {
        if site == self.id {
            self.drop_held(&page, version, seq);
        } else {
            self.queue_task(TaskKind::Drop, page, version, seq, site, None);
        }
    }

    /// End task `i`, telling a waiting putter `status`. A call in flight is cancelled by
    /// the next `drive` (its outcome is ignored: the generation moved on).
    pub(super) fn end_task(&mut self, i: usize, status: PutStatus) {
        let t = self.tasks[i];
        if matches!(t.state, TaskState::Free | TaskState::Cancel(_)) {
            return;
        }
        self.tasks[i].state = match t.state {
            TaskState::InFlight { call, .. } => TaskState::Cancel(call),
            _ => TaskState::Free,
        };
        self.tasks[i].notify = None;
        self.tasks[i].generation = t.generation.wrapping_add(1).max(1);
        if t.kind == TaskKind::Register {
            self.notify(t.notify, t.page, t.version, status);
        }
    }

    /// A copy still registering was taken back: a registration call in flight stays (its
    /// answer names the identity to take back, if the directory named the copy), but it is
    /// never sent again and nobody waits on it any more. A registration the directory may
    /// have applied without answering is left to the scrub's `DIRVERIFY`, which names the
    /// exact identity.
    pub(super) fn withdraw_register(&mut self, page: &PageId) {
        if let Some(i) = self.tasks.iter().position(|t| t.live() && t.kind == TaskKind::Register && t.page == *page) {
            let t = self.tasks[i];
            self.tasks[i].notify = None;
            self.tasks[i].withdrawn = true;
            self.notify(t.notify, t.page, t.version, PutStatus::Failed);
            if !matches!(t.state, TaskState::InFlight { .. }) {
                self.end_task(i, PutStatus::Failed);
            }
        }
    }

    /// Whether this node is still settling an earlier copy of `page` with its directory
    /// (a removal, or a withdrawn registration, not yet answered): a new copy of the page
    /// waits until then, so an answer or a late duplicate about the old copy cannot be
    /// taken for the new one (at one site and version, both may get the same identity).
    pub(super) fn settling(&self, page: &PageId) -> bool {
        self.tasks.iter().any(|t| {
            t.live() && t.page == *page && (t.kind == TaskKind::Remove || (t.kind == TaskKind::Register && t.withdrawn))
        })
    }

    /// A held copy went away: its pending registration ends.
    pub(super) fn cancel_register(&mut self, page: &PageId, status: PutStatus) {
        if let Some(i) = self.tasks.iter().position(|t| t.live() && t.kind == TaskKind::Register && t.page == *page) {
            self.end_task(i, status);
        }
    }
}
