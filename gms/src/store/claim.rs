// SPDX-License-Identifier: GPL-2.0-only
//! A load first asks every member — itself included — for the newest version it knows of
//! the volume's pages (`TOPVERSION`, [`crate::top`]: the copies it holds, its directory
//! entries and their floors), and claims an epoch above it ([`super::volume`]). Members
//! that joined while the label and map were read are asked before the claim.
//!
//! Why: the label and floor map name the epochs of the loads that wrote them, but when
//! every newer copy of both died while no load held the volume, an older label is all a
//! reload finds, and it would claim again an epoch an earlier load used. Its writes would
//! then carry versions below what that load left: a directory keeping such a floor refuses
//! the new copies' registrations, and their holders drop them after the write was
//! acknowledged; a surviving copy of the earlier load would pass for newer than the new
//! data. Whatever is left of an epoch is on a member.
//!
//! So the claim waits until every member has answered to the end of its tables, and until
//! every member declared failed during this load before it answered was heard again (its
//! memory, if it was only suspected, holds what it knew) or restarted (its memory is gone,
//! and what it knew with it). A member that answers nothing is asked again after the retry
//! delay.
//!
//! The same question about one page guards the floor map: each map page's copy read is
//! checked with every member (its copies, its directory entries and floors), and one
//! older than a write a member knows of is taken as unreadable — its pages' floors are
//! lost ([`super::volume`]) — rather than let an older map say a written page never was,
//! or take a stray for a page's copy. While a member declared failed during the load may
//! hold the newer copy, the map page is read again later instead.
//!
//! What members say is bounded by the volume's own meta pages: a member's answer may lift
//! the claim at most [`EPOCH_REACH`] epochs above the newest epoch the label and map copies
//! read name (their contents and versions); an answer beyond is taken at that reach and
//! counted (`epochs_refused`). A keyed member that lies — one message naming the last epoch
//! a version holds — would otherwise have every later load refused
//! (`VersionsExhausted`); now it spends at most that many of the 2^24 epochs per load. A
//! holder of a label or map copy is trusted with its contents, as any holder is with its
//! page's bytes. An honest cluster goes past the reach only after 4,096 loads, each of
//! whose label and map copies all died before the next load: its claim then reuses an
//! epoch, as it did before this round existed. Not bounded: a member's word that a map page
//! was written after the copy read. A lying member can so have that page's floors taken
//! for lost (reads of its pages fail `Lost` until each is written again); an honest one
//! cannot be told from it, as the newer copies it knows of are gone.
//!
//! Limit: a member that was unreachable (and never a member) for the whole load is not
//! asked; should it come back later with copies or floors of a newer epoch, the load's
//! writes meet them as before. A map page is checked with the members of the time only.

use super::super::net::storage::Storage;
use super::super::ops::TopScope;
use super::super::top::family;
use super::super::types::{OpId, TopResult};
use super::nodes::NodeSet;
use super::record::Clock;
use super::{IssueKind, Phase, Req, Store};

/// How many epochs above the volume's own meta pages a member's answer may lift a claim.
pub const EPOCH_REACH: u32 = 1 << 12;

/// One member's `TOPVERSION` of the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TopAsk {
    node: u16,
    scope: TopScope,
    sent: bool,
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// The next member's question, once the last one was answered; the claim once every
    /// member was heard to the end.
    pub(super) fn advance_top(&mut self, now: u64) {
        if now < self.load_at || self.meta_req_running() {
            return;
        }
        let askable = |n: u16| n == self.me || self.members.contains(n);
        let at = self.top_at.filter(|&(n, _)| askable(n));
        let next = at.or_else(|| self.unasked(self.top_asked).map(|n| (n, 0)));
        let Some((node, from)) = next else {
            // Every member answered; so did every member declared failed since, or it
            // restarted: nothing of the volume is on a member left unasked.
            if self.departed.minus(self.top_asked).is_empty() {
                self.phase = if self.meta_known { self.claim_heard() } else { Phase::Label };
            }
            return;
        };
        self.top_at = Some((node, from));
        if let Some(slot) = self.free_slot() {
            self.reqs[slot] = Req::Top(TopAsk { node, scope: TopScope::Tables { from }, sent: false });
        }
    }

    /// The next member's question about map page `m`, once the last one was answered; the
    /// next map page once every member answered.
    pub(super) fn advance_map_check(&mut self, now: u64, m: u64) {
        if now < self.load_at || self.meta_req_running() {
            return;
        }
        let Some(node) = self.unasked(self.map_asked) else { return self.after_map(m) };
        let page = self.page_id(self.pages + m, 0).page;
        if let Some(slot) = self.free_slot() {
            self.reqs[slot] = Req::Top(TopAsk { node, scope: TopScope::Page(page), sent: false });
        }
    }

    /// This node, then each member, that is not in `asked`.
    fn unasked(&self, asked: NodeSet) -> Option<u16> {
        [self.me].into_iter().chain(self.members.iter()).find(|&n| !asked.contains(n))
    }

    /// Request `i`'s question, if it is still to be sent.
    pub(super) fn poll_top(&mut self, i: usize) -> Option<IssueKind<F>> {
        let Req::Top(t) = &mut self.reqs[i] else { return None };
        if t.sent {
            return None;
        }
        t.sent = true;
        Some(IssueKind::Top { node: t.node, family: family(self.space), scope: t.scope })
    }

    /// Request `i`'s question could not be sent, or got no answer: asked again later.
    pub(super) fn top_unanswered(&mut self, i: usize, now: u64) {
        self.reqs[i] = Req::Free;
        self.load_at = now.saturating_add(self.cfg.retry_delay_ns);
    }

    /// The members this load may be waiting for: declared failed before they told what
    /// they know of the volume, or — once every member was asked — while the label and
    /// map are read (they may hold their only copies), and not heard since. They may only
    /// be suspected, with copies of a later epoch. Empty once the volume is loaded. A
    /// member gone for good holds the load until the volume is loaded again without it (a
    /// member never heard during a load is not asked): what a runtime tells its user when
    /// requests fail meanwhile.
    pub fn load_waits_for(&self) -> NodeSet {
        match self.phase {
            Phase::Top => self.departed.minus(self.top_asked),
            p if p.loading() => self.departed,
            _ => NodeSet::EMPTY,
        }
    }

    /// The claim goes above what members said, up to [`EPOCH_REACH`] above the meta
    /// pages' newest epoch (the claim's epoch is one past it).
    fn claim_heard(&mut self) -> Phase {
        let reach = self.label.epoch.saturating_add(EPOCH_REACH - 1);
        if self.heard > reach {
            self.stats.epochs_refused += 1;
            self.heard = reach;
        }
        self.claim_above(self.heard);
        Phase::Claim
    }

    /// A `TOPVERSION` this store asked ended.
    pub fn handle_top(&mut self, now: u64, op: OpId, result: TopResult) {
        let Some(i) = self.take_op(op) else { return };
        let Req::Top(t) = self.reqs[i] else { return };
        let TopResult::Known { top, next } = result else { return self.top_unanswered(i, now) };
        self.reqs[i] = Req::Free;
        self.heard = self.heard.max(Clock::epoch_of(top));
        match (t.scope, next, self.phase) {
            (TopScope::Tables { .. }, Some(from), _) => self.top_at = Some((t.node, from)),
            (TopScope::Tables { .. }, None, _) => {
                self.top_asked.insert(t.node);
                self.top_at = None;
            }
            // A write of the map page newer than the copy read: the page is looked for
            // anew, every member asked, once the retry delay passed (a member that was
            // away may hold it), and again after members came or went, and while a
            // member declared failed (perhaps only suspected) may hold it; else what it
            // said is lost.
            (TopScope::Page(_), _, Phase::MapCheck { m })
                if Clock::generation(top) > Clock::generation(self.map_read) =>
            {
                self.stats.stale_maps += 1;
                if self.map_again && self.departed.is_empty() {
                    self.map_unknown(m);
                    self.after_map(m);
                } else {
                    self.map_again = true;
                    self.forget_meta(m);
                    self.phase = Phase::Map { m };
                    self.load_at = now.saturating_add(self.cfg.retry_delay_ns);
                }
            }
            (TopScope::Page(_), _, _) => self.map_asked.insert(t.node),
        }
    }
}
