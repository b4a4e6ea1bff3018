// SPDX-License-Identifier: GPL-2.0-only
//! `TOPVERSION`: the newest version a member knows of any page of a volume — over the
//! copies it holds and its share of the directory, tombstones' floors included.
//!
//! A loading writer ([`super::store`]) asks every member before it claims an epoch. Its
//! label and floor map name the epochs of the loads that wrote them, but when the newest
//! copies of both died (their holders crashed while no load held the volume), an older
//! label may be all that is left, and the epochs claimed since it would be claimed again:
//! new writes would then carry versions below copies and floors an earlier load left,
//! and a directory keeping such a floor refuses the new copies' registrations (their
//! holders drop them after the write was acknowledged). Whatever survives of an epoch —
//! a copy, a directory entry, a floor — is on some member, and this question finds it.
//!
//! A volume's replicas are pages of distinct spaces that differ in their top four bits
//! ([`crate::replica`]): one question names their [`family`]. The member answers from a
//! bounded run of its table slots ([`TOP_SCAN`]) and says where to go on, so one answer
//! costs the same however large its tables are; or about one page number (every replica
//! of it): a load asks so whether a map page it read is the newest one written.

use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{GmsNode, Host};
use super::ops::*;
use super::page::{PageId, Version};
use super::slots::OpKind;
use super::types::*;

/// Table slots one answer scans.
pub const TOP_SCAN: usize = 4096;

/// The error a `TOPVERSION` from a node that is not a member gets.
pub const NOT_A_MEMBER: u16 = 64;

/// The bits a volume's replica spaces share ([`crate::replica`] sets the top four).
pub const fn family(space: u64) -> u64 {
    space & !(0xf << 60)
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
    /// Ask `node` (this node itself included) for the newest version it knows of the pages
    /// `scope` names in `family` ([`family`]): every page, scanning its tables from a slot
    /// (0 to start), or one page number. The completion is [`OpResult::Top`]: the newest
    /// version found and, for a scan, where to ask from next; or `Failed` (no answer, or
    /// refused: the asker is not a member).
    pub fn top_version<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        node: u16,
        family: u64,
        scope: TopScope,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.enter(now);
        let at = match scope {
            TopScope::Tables { from } => from,
            TopScope::Page(_) => 0,
        };
        let i = self.alloc_op(OpKind::Top, mode, PageId::new(family, at), Version(0))?;
        let id = self.op_id(i);
        if node == self.id {
            let (top, next) = self.top_of(family, scope);
            self.finish(i, OpResult::Top(TopResult::Known { top, next }));
            return Ok(id);
        }
        self.ops[i].dst = node;
        let req = TopReq { family, scope };
        match rpc.call::<TopVersion>(now, self, node, &req, ReplyTo::None, Mode::NonBlocking) {
            Ok(call) => self.launched(rpc, i, call),
            Err(e) => {
                self.free_op(i);
                return Err(GmsError::Rpc(e));
            }
        }
        Ok(id)
    }

    /// The newest version of `family` that `scope` asks for, and for a scan the slot to go
    /// on from (`None`: the end).
    fn top_of(&self, family: u64, scope: TopScope) -> (Version, Option<u64>) {
        match scope {
            TopScope::Tables { from } => self.top_in(family, from),
            TopScope::Page(page) => {
                let spaces = (0..16u64).map(|k| PageId::new(family | k << 60, page));
                let held = spaces.clone().filter_map(|p| self.held.get(&p)).map(|h| h.version);
                let dir = spaces.filter_map(|p| self.dir.entry(&p)).map(|e| e.version.max(e.floor));
                (held.chain(dir).max().unwrap_or(Version(0)), None)
            }
        }
    }

    /// The newest version of `family` in [`TOP_SCAN`] slots from `from` of the held table
    /// then the directory (numbered on from the held table's end), and the slot after
    /// them (`None`: the end).
    fn top_in(&self, family: u64, from: u64) -> (Version, Option<u64>) {
        let of = |p: &PageId| super::top::family(p.space) == family;
        let held_slots = self.held.capacity();
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let end = from.saturating_add(TOP_SCAN).min(held_slots + self.dir.capacity());
        let held = self.held.range(from, end).filter(|(p, _)| of(p)).map(|(_, h)| h.version);
        let dir_from = from.saturating_sub(held_slots);
        let dir_end = end.saturating_sub(held_slots);
        let dir = self.dir.range(dir_from, dir_end).filter(|(p, _)| of(p)).map(|(_, e)| e.version.max(e.floor));
        let top = held.chain(dir).max().unwrap_or(Version(0));
        let next = (end < held_slots + self.dir.capacity()).then_some(end as u64);
        (top, next)
    }

    /// A member's `TOPVERSION`; anyone else is refused.
    pub(super) fn serve_top(&mut self, inc: &Incoming<'_, F>, member: bool) -> Action<F> {
        match inc.decode::<TopVersion>() {
            Ok(_) if !member => Action::Error(RpcError::Remote(NOT_A_MEMBER)),
            Ok(req) => {
                let (top, next) = self.top_of(req.family, req.scope);
                Action::reply(&TopReply { top, next: next.unwrap_or(0) }, None)
            }
            Err(e) => Action::Error(e),
        }
    }

    /// The answer to operation `i`'s `TOPVERSION`.
    pub(super) fn top_reply(&mut self, i: usize, o: &Outcome<F>) -> TopResult {
        if let Ok(Reply { payload: Payload::Buffer { frame, .. } | Payload::Frame { frame, .. }, .. }) = o {
            self.host.release(*frame);
        }
        let from = self.ops[i].page.page;
        match o.as_ref().ok().map(|r| r.decode::<TopReply>()) {
            // A cursor that does not move on is a malformed answer (it would never end).
            Some(Ok(r)) if r.next == 0 || r.next > from => {
                TopResult::Known { top: r.top, next: (r.next != 0).then_some(r.next) }
            }
            _ => TopResult::Failed,
        }
    }
}
