// SPDX-License-Identifier: GPL-2.0-only
//! `GETPAGES`: several pages of one space in one round trip, from the member a requester
//! believes holds them all (a block device's pages it put there) — the papers' scatter/
//! gather payloads. No heap, no `unsafe`.
//!
//! The requester names up to [`GETPAGES_MAX`] pages within [`GETPAGES_SPAN`] of the first
//! (a mask) with the version it knows of each, and arms one IPT entry on as many frames
//! (the runtime's group frame). The holder answers only if it holds every page at that
//! version or newer: one reply whose payload is the pages in order, gathered from its
//! frames ([`Host::gather`]) and scattered into the requester's. Otherwise it answers a
//! miss, and the requester asks page by page (`getpage_hinted`, whose miss goes to the
//! directory). Like a hinted getpage it never moves a copy and never repairs the
//! directory, so it is only for pages this node alone writes.
//!
//! The completion is a getpage's ([`GetResult`], its page the first one): a hit's
//! `version` is the oldest of the pages', each at least the version asked for, and its
//! `len` is the whole payload (the pages' lengths are equal).

use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{GmsNode, Host};
use super::ops::*;
use super::page::{PageId, Version};
use super::slots::OpKind;
use super::types::*;

/// The pages `mask` names from `first`, in order (`None` past the end of the space).
fn pages(first: PageId, mask: u64) -> impl Iterator<Item = Option<PageId>> {
    (0..GETPAGES_SPAN).filter(move |i| mask >> i & 1 == 1).map(move |i| {
        let page = first.page.checked_add(i)?;
        Some(PageId::new(first.space, page))
    })
}

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
    /// Fetch the pages `mask` names from `first` (bit `i`: page `first.page + i`; 1 to
    /// [`GETPAGES_MAX`] bits within [`GETPAGES_SPAN`]) from `holder`, which the caller
    /// believes holds each at `known[k]` (in the mask's order) or newer, into `reply_to`:
    /// a frame naming as many page-sized pieces, armed for the reply. A miss means only
    /// that `holder` lacks one of them: ask page by page then. For pages this node alone
    /// writes (see [`Self::getpage_hinted`]). On `Err` nothing was sent and the frame is
    /// still the caller's.
    #[allow(clippy::too_many_arguments)]
    pub fn getpages_hinted<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        first: PageId,
        mask: u64,
        known: &[Version],
        holder: u16,
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.enter(now);
        let n = mask.count_ones() as usize;
        let fits = (1..=GETPAGES_MAX).contains(&n) && known.len() == n && pages(first, mask).all(|p| p.is_some());
        let want = Versions::pack(known).filter(|_| fits).ok_or(GmsError::BadPages)?;
        if self.policy(first.space).reads == ReadPolicy::Moving {
            return Err(GmsError::BadPages);
        }
        if holder == self.id || !self.members.contains(holder) {
            return Err(GmsError::BadTarget);
        }
        let i = self.alloc_op(OpKind::Get, mode, first, want.base)?;
        let id = self.op_id(i);
        self.ops[i].group = Some((mask, want));
        self.ops[i].dst = holder;
        let req = GetPagesReq { first, mask, want, view: self.members.view() };
        match rpc.call::<GetPages>(now, self, holder, &req, reply_to, Mode::NonBlocking) {
            Ok(call) => {
                self.stats.gets += n as u64;
                self.launched(rpc, i, call);
                Ok(id)
            }
            Err(e) => {
                self.free_op(i);
                Err(GmsError::Rpc(e))
            }
        }
    }

    /// The answer to `GETPAGES` operation `i`.
    pub(super) fn getpages_reply(&mut self, i: usize, o: &Outcome<F>) -> GetResult<F> {
        let op = self.ops[i];
        let Some((mask, want)) = op.group else {
            return GetResult::Miss { reason: MissReason::Malformed, frame: None };
        };
        let n = op.pages();
        let r = match o {
            Ok(r) => r,
            Err(e) => return self.get_failed(&op, *e),
        };
        // Only the caller's own frame is an answer; a receive buffer goes back at once.
        let (frame, len) = match r.payload {
            Payload::Frame { frame, len } => (Some(frame), len),
            Payload::Buffer { frame, .. } => {
                self.host.release(frame);
                (None, 0)
            }
            Payload::None => (None, 0),
        };
        let rep = match r.decode::<GetPagesReply>() {
            Ok(rep) if rep.first == op.page && rep.mask == mask && rep.server == op.dst => rep,
            _ => {
                self.stats.get_failures += n;
                return GetResult::Miss { reason: MissReason::Malformed, frame };
            }
        };
        match (rep.status, frame) {
            (GetStatus::Hit, Some(frame)) if len > 0 && u64::from(len) % n == 0 => {
                if (0..n as usize).any(|k| rep.versions.get(k) < want.get(k)) {
                    // Older than the reader knows: no answer.
                    self.stats.misses += n;
                    return GetResult::Miss { reason: MissReason::NotCached, frame: Some(frame) };
                }
                self.stats.hits_2way += n;
                GetResult::Hit { version: rep.versions.base, frame, len, via: Via::TwoWay, held: false }
            }
            (GetStatus::Miss, frame) => {
                self.stats.misses += n;
                GetResult::Miss { reason: MissReason::NotCached, frame }
            }
            (GetStatus::Refused, frame) => {
                self.stats.get_failures += n;
                GetResult::Miss { reason: MissReason::Refused, frame }
            }
            (_, frame) => {
                self.stats.get_failures += n;
                GetResult::Miss { reason: MissReason::Malformed, frame }
            }
        }
    }

    /// `GETPAGES` at the member asked: every page from this node's copies, or a miss.
    /// Only a member may ask, and only straight (never delegated).
    pub(super) fn serve_getpages(&mut self, inc: &Incoming<'_, F>, member: bool) -> Action<F> {
        let req = match inc.decode::<GetPages>() {
            Ok(r) => r,
            Err(e) => return Action::Error(e),
        };
        let answer = |node: &Self, status| {
            let rep = GetPagesReply {
                status,
                first: req.first,
                mask: req.mask,
                versions: Versions::default(),
                server: node.id,
            };
            Action::reply(&rep, None)
        };
        let miss = |node: &Self| answer(node, GetStatus::Miss);
        if !member || inc.hops > 0 {
            self.stats.rejected_gets += 1;
            return answer(self, if member { GetStatus::Miss } else { GetStatus::Refused });
        }
        let mut frames = [None; GETPAGES_MAX];
        let mut versions = [Version(0); GETPAGES_MAX];
        let mut n = 0;
        let mut page_len = None;
        for (k, page) in pages(req.first, req.mask).enumerate() {
            let held = page.and_then(|p| self.held.get(&p)).filter(|h| h.version >= req.want.get(k));
            // Equal lengths: the requester splits the payload evenly.
            let Some(h) = held.filter(|h| *page_len.get_or_insert(h.len) == h.len) else { return miss(self) };
            frames[k] = Some(h.frame);
            versions[k] = h.version;
            n = k + 1;
        }
        let (Some(first), Some(versions), Some(len)) = (frames[0], Versions::pack(&versions[..n]), page_len) else {
            return miss(self);
        };
        let mut list = [first; GETPAGES_MAX];
        for (l, f) in list.iter_mut().zip(&frames[..n]) {
            *l = f.unwrap_or(first);
        }
        let Some(g) = self.host.gather(&list[..n], len) else { return miss(self) };
        let epoch = self.epoch;
        for page in pages(req.first, req.mask).flatten() {
            if let Some(h) = self.held.get_mut(&page) {
                h.last_access = epoch;
            }
        }
        self.stats.gets_served += n as u64;
        let rep = GetPagesReply { status: GetStatus::Hit, first: req.first, mask: req.mask, versions, server: self.id };
        Action::reply(&rep, Some((g, len * n as u32)))
    }
}
