// SPDX-License-Identifier: GPL-2.0-only
//! A node's part in the epoch-based global LRU of [`super::lru`]: one [`Lru`] per node,
//! sans-IO (messages in through [`Lru::handle`], timers through [`Lru::poll`] and
//! [`Lru::poll_timeout`], one-way sends out through [`Lru::take_send`]), run by user space
//! and the kernel module alike.
//!
//! The coordinator is the lowest live member. Every `epoch_ns` (or earlier, when a member
//! reports that the epoch's budget is used up: `LRU_NEXT`) it sends `LRU_START` to every
//! member; each answers with its [`AgeSummary`] (`LRU_SUMMARY`: resident pages, free
//! frames under its budget, its oldest pages' ages on the [`quantize_age`] scale of a
//! `tick_ns` clock); once all reported or `deadline_ns` passed, the coordinator computes
//! the [`EpochPlan`] and broadcasts it (`LRU_PLAN`). A node then
//! - draws its putpage targets in proportion to the plan's weights (least-loaded only
//!   before its first plan, or when no other member has weight left this epoch),
//! - discards an evicted page older than the threshold instead of putting it, and
//! - as a target, keeps `headroom` frames free by discarding its oldest held pages at
//!   least as old as the threshold (the globally oldest pages make room for new ones).

use super::lru::{
    quantize_age, AgeSummary, Coordinator, EpochPlan, AGE_LEVELS, OP_LRU_NEXT, OP_LRU_PLAN, OP_LRU_START,
    OP_LRU_SUMMARY, SUMMARY_MAX_GROUPS,
};
use super::net::storage::Storage;
use super::node::{GmsNode, Host};
use super::page::mix64;

/// Node ids a plan covers (at least any GMS node's member capacity).
pub const LRU_NODES: usize = 16;
/// Draws [`Lru::choose_target`] makes before it gives up on finding a usable member.
const DRAWS: usize = 4;
/// Sends one step can queue: an epoch's start and its plan to every other member, a
/// summary and a request for the next epoch.
const OUTBOX: usize = 2 * LRU_NODES + 2;
/// Held-table slots an age summary looks at, at most ([`GmsNode::lru_summary`]): 16,384
/// slots are about 1 MB of table and hold thousands of pages on a node of any size.
pub const SUMMARY_SLOTS: usize = 16_384;
/// Age groups per summary.
pub const LRU_GROUPS: usize = SUMMARY_MAX_GROUPS;

pub type Plan = EpochPlan<LRU_NODES>;
pub type Summary = AgeSummary<LRU_GROUPS>;

/// Global-LRU parameters (times in ns of the port clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LruConfig {
    /// Longest epoch.
    pub epoch_ns: u64,
    /// Shortest epoch (an early `LRU_NEXT` waits this long after the last start).
    pub min_epoch_ns: u64,
    /// How long the coordinator waits for summaries.
    pub deadline_ns: u64,
    /// `M`: the globally oldest pages an epoch plans to replace.
    pub oldest_pages: u32,
    /// The unit of page ages.
    pub tick_ns: u64,
    /// Free frames a target keeps by discarding its oldest pages.
    pub headroom: usize,
}

impl Default for LruConfig {
    fn default() -> Self {
        LruConfig {
            epoch_ns: 50_000_000,
            min_epoch_ns: 2_000_000,
            deadline_ns: 5_000_000,
            oldest_pages: 256,
            tick_ns: 1_000_000,
            headroom: 16,
        }
    }
}

/// Counters of the global LRU on one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LruStats {
    /// Epochs this node started as coordinator.
    pub epochs_started: u64,
    /// Plans this node adopted.
    pub plans: u64,
    pub summaries_sent: u64,
    /// Putpage targets drawn from a plan / chosen least-loaded (no plan, or the drawn member
    /// was not usable).
    pub puts_by_plan: u64,
    pub puts_fallback: u64,
    /// Evicted pages discarded instead of put (older than the threshold).
    pub evictions_discarded: u64,
    /// Held pages discarded to make room (the globally oldest).
    pub held_discarded: u64,
    /// Dirty held pages old enough to discard, kept when a node made room and found too
    /// few clean ones (summed over such scans: their writer has not written them to their
    /// block server yet, [`super::node::AgeOut`]).
    pub dirty_kept: u64,
    /// LRU messages that were malformed or for another epoch, and summaries that came
    /// after their epoch's plan (kept for the next plan).
    pub rejected: u64,
    /// Sends lost because the outbox was full (the epoch's deadline covers them).
    pub outbox_full: u64,
}

impl LruStats {
    const ZERO: LruStats = LruStats {
        epochs_started: 0,
        plans: 0,
        summaries_sent: 0,
        puts_by_plan: 0,
        puts_fallback: 0,
        evictions_discarded: 0,
        held_discarded: 0,
        dirty_kept: 0,
        rejected: 0,
        outbox_full: 0,
    };
}

/// A received LRU message (copied out of the receive path).
#[derive(Clone, Copy, Debug)]
pub struct LruMsg {
    pub src: u16,
    pub op: u16,
    pub len: usize,
    pub body: [u8; 104],
}

/// What the port must send (one-way) after [`Lru::handle`] or [`Lru::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LruSend {
    pub dst: u16,
    pub op: u16,
    pub len: usize,
    pub body: [u8; 100],
}

/// One node's global-LRU state.
#[derive(Debug)]
pub struct Lru {
    pub cfg: LruConfig,
    me: u16,
    /// The newest plan adopted, and the LRU clock when it was.
    plan: Option<Plan>,
    plan_tick: u64,
    coord: Coordinator<LRU_NODES, LRU_GROUPS>,
    /// As coordinator: the epoch being collected or last planned, when it started.
    coord_epoch: u32,
    started_at: Option<u64>,
    /// An `LRU_NEXT` (or our own plan's end) asked for the next epoch.
    next_asked: bool,
    /// [`Self::start_next_epoch`] was called.
    forced: bool,
    /// The epoch we last sent `LRU_NEXT` for.
    asked_for: u32,
    rng: u64,
    /// The node's `pages_stored` when [`Self::note_stored`] last looked.
    stored_seen: u64,
    pub stats: LruStats,
    /// Sends queued for the runtime, oldest first: `out[..nout]`.
    out: [LruSend; OUTBOX],
    nout: usize,
    /// Sends already taken from the front of `out`.
    taken: usize,
}

fn u32_body(v: u32) -> ([u8; 100], usize) {
    let mut b = [0u8; 100];
    b[..4].copy_from_slice(&v.to_le_bytes());
    (b, 4)
}

fn read_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(..4)?.try_into().ok()?))
}

impl Lru {
    /// Node `me`'s part. A `const fn`: the kernel module copies a `static` made with it
    /// onto its heap (an `Lru` is a few KiB), then calls [`Self::set_node`].
    pub const fn new(me: u16, cfg: LruConfig) -> Self {
        Lru {
            cfg,
            me,
            plan: None,
            plan_tick: 0,
            coord: Coordinator::new(me, cfg.oldest_pages),
            coord_epoch: 0,
            started_at: None,
            next_asked: false,
            forced: false,
            asked_for: 0,
            rng: 0x9e37_79b9_7f4a_7c15 ^ ((me as u64 + 1) << 32),
            stored_seen: 0,
            stats: LruStats::ZERO,
            out: [LruSend { dst: 0, op: 0, len: 0, body: [0; 100] }; OUTBOX],
            nout: 0,
            taken: 0,
        }
    }

    /// Make this (fresh) state node `me`'s.
    pub fn set_node(&mut self, me: u16) {
        self.me = me;
        self.coord.set_node(me);
        self.rng = 0x9e37_79b9_7f4a_7c15 ^ ((me as u64 + 1) << 32);
    }

    /// The plan in force (none before the first).
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The age, on the summaries' scale, of a page last used at `last_tick`, as of the
    /// plan (the threshold is an age at the epoch's start; a page used since is younger
    /// than any).
    pub fn age_at_plan(&self, last_tick: u64) -> u32 {
        quantize_age(self.plan_tick.saturating_sub(last_tick))
    }

    /// The LRU clock at `now` (ns).
    pub fn tick(&self, now: u64) -> u64 {
        now / self.cfg.tick_ns.max(1)
    }

    fn send(&mut self, dst: u16, op: u16, body: [u8; 100], len: usize) {
        if self.taken == self.nout {
            (self.taken, self.nout) = (0, 0);
        }
        match self.out.get_mut(self.nout) {
            Some(s) => {
                *s = LruSend { dst, op, len, body };
                self.nout += 1;
            }
            None => self.stats.outbox_full += 1,
        }
    }

    /// The next one-way message to send, oldest first.
    pub fn take_send(&mut self) -> Option<LruSend> {
        let s = self.out[..self.nout].get(self.taken).copied()?;
        self.taken += 1;
        Some(s)
    }

    /// Coordinator duties at `now`: start an epoch when due, make the plan when every
    /// summary is in or the deadline passed. `members`: the live view; `summary` builds
    /// this node's own summary for an epoch.
    pub fn poll(&mut self, now: u64, members: &[u16], summary: impl FnOnce(u32) -> Summary) {
        let me = self.me;
        let coordinator = members.iter().copied().min() == Some(me);
        if !coordinator {
            self.started_at = None;
            return;
        }
        let due = match self.started_at {
            None => true,
            Some(_) if self.forced => true,
            Some(t) => {
                now.saturating_sub(t) >= self.cfg.epoch_ns
                    || (self.next_asked && now.saturating_sub(t) >= self.cfg.min_epoch_ns)
            }
        };
        if due {
            self.next_asked = false;
            self.forced = false;
            self.coord_epoch = self.coord_epoch.max(self.plan.map_or(0, |p| p.epoch())) + 1;
            self.started_at = Some(now);
            self.stats.epochs_started += 1;
            self.coord.start_epoch(self.coord_epoch, members, now + self.cfg.deadline_ns);
            let (b, n) = u32_body(self.coord_epoch);
            for m in members.iter().copied().filter(|&m| m != me) {
                self.send(m, OP_LRU_START, b, n);
            }
            let own = summary(self.coord_epoch);
            if self.coord.handle_summary(now, &own).is_err() {
                self.stats.rejected += 1;
            }
        }
        if let Some(plan) = self.coord.poll_plan(now) {
            let mut b = [0u8; 100];
            if let Ok(n) = plan.encode(&mut b) {
                for m in members.iter().copied().filter(|&m| m != me) {
                    self.send(m, OP_LRU_PLAN, b, n);
                }
            }
            self.adopt(plan, now);
        }
    }

    fn adopt(&mut self, plan: Plan, now: u64) {
        if self.plan.is_none_or(|p| plan.epoch() >= p.epoch()) {
            self.plan = Some(plan);
            self.plan_tick = self.tick(now);
            self.stats.plans += 1;
        }
    }

    /// As coordinator: start the next epoch at the next [`Self::poll`], whatever its
    /// timers say (tests, and a membership change).
    pub fn start_next_epoch(&mut self) {
        self.forced = true;
    }

    /// When [`Self::poll`] must run next (as coordinator).
    pub fn poll_timeout(&self) -> Option<u64> {
        let next = self.started_at.map(|t| t + self.cfg.epoch_ns);
        match (next, self.coord.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A received LRU message.
    pub fn handle(&mut self, now: u64, m: &LruMsg, summary: impl FnOnce(u32) -> Summary) {
        let body = &m.body[..m.len.min(m.body.len())];
        match m.op {
            OP_LRU_START => match read_u32(body) {
                Some(epoch) if body.len() == 4 => {
                    let s = summary(epoch);
                    let mut b = [0u8; 100];
                    if let Ok(n) = s.encode(&mut b) {
                        self.send(m.src, OP_LRU_SUMMARY, b, n);
                        self.stats.summaries_sent += 1;
                    }
                }
                _ => self.stats.rejected += 1,
            },
            OP_LRU_SUMMARY => match Summary::decode(body) {
                Ok(s) if s.node() == m.src && self.coord.handle_summary(now, &s).is_ok() => {}
                _ => self.stats.rejected += 1,
            },
            OP_LRU_PLAN => match Plan::decode(body, self.me) {
                Ok(p) => self.adopt(p, now),
                Err(_) => self.stats.rejected += 1,
            },
            OP_LRU_NEXT => match read_u32(body) {
                Some(e) if body.len() == 4 && e == self.coord_epoch => self.next_asked = true,
                Some(_) if body.len() == 4 => {} // an older epoch: already moved on
                _ => self.stats.rejected += 1,
            },
            _ => self.stats.rejected += 1,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The target of a putpage by the plan, or `None` (fall back to least loaded).
    /// Drawn in proportion to what is left of the weights this epoch (counted down); once
    /// that is used up (the next epoch is asked for), in proportion to the whole weights.
    /// `usable`: whether a member may be chosen (e.g. it did not just refuse, it is one of
    /// the caller's targets); a draw that is not usable is drawn again, a few times, so
    /// the usable members keep their proportions.
    pub fn choose_target(&mut self, coordinator: Option<u16>, usable: impl Fn(u16) -> bool) -> Option<u16> {
        let mut chosen = None;
        for _ in 0..DRAWS {
            let r = self.next_random();
            let plan = self.plan.as_mut()?;
            let t = match plan.choose_target(r) {
                Some(t) => Some(t),
                None => Plan::new(plan.me(), plan.epoch(), plan.threshold(), *plan.weights()).choose_target(r),
            };
            if let Some(t) = t.filter(|&t| usable(t)) {
                plan.note_put(t);
                chosen = Some(t);
                break;
            }
        }
        self.maybe_ask_next(coordinator);
        chosen
    }

    /// Whether an evicted page of `age` is discarded rather than put (counted if so).
    pub fn should_discard(&mut self, age: u32, coordinator: Option<u16>) -> bool {
        let Some(plan) = self.plan.as_mut() else { return false };
        if !plan.should_discard(age) {
            return false;
        }
        plan.note_discarded();
        self.stats.evictions_discarded += 1;
        self.maybe_ask_next(coordinator);
        true
    }

    /// This node stored `n` putpages.
    pub fn received(&mut self, n: u64, coordinator: Option<u16>) {
        if let Some(plan) = self.plan.as_mut() {
            for _ in 0..n {
                plan.note_received();
            }
            self.maybe_ask_next(coordinator);
        }
    }

    /// Count the putpages the node stored since the last call against the plan:
    /// `pages_stored` is the node's running total.
    pub fn note_stored(&mut self, pages_stored: u64, coordinator: Option<u16>) {
        if pages_stored > self.stored_seen {
            self.received(pages_stored - self.stored_seen, coordinator);
            self.stored_seen = pages_stored;
        }
    }

    /// The threshold a held page must reach to be discarded for room (`None`: no plan).
    pub fn threshold(&self) -> Option<u32> {
        self.plan.map(|p| p.threshold())
    }

    fn maybe_ask_next(&mut self, coordinator: Option<u16>) {
        let Some(plan) = self.plan else { return };
        let (Some(c), e) = (coordinator, plan.epoch()) else { return };
        if plan.should_end_epoch() && self.asked_for != e {
            self.asked_for = e;
            if c == self.me {
                if e == self.coord_epoch {
                    self.next_asked = true;
                }
            } else {
                let (b, n) = u32_body(e);
                self.send(c, OP_LRU_NEXT, b, n);
            }
        }
    }
}

/// This node's summary for `epoch`: `ages` are its held pages' ages (any order, each
/// below [`AGE_LEVELS`]).
pub fn build_summary(me: u16, epoch: u32, budget: usize, ages: &[u32]) -> Summary {
    let mut counts = [0u32; AGE_LEVELS];
    for &a in ages {
        counts[(a as usize).min(AGE_LEVELS - 1)] += 1;
    }
    summary_of_counts(me, epoch, budget, ages.len(), &counts)
}

/// This node's summary for `epoch` from how many of its `pages` held pages have each age:
/// the oldest ages first, as many groups as a summary holds. Linear in nothing but the
/// ages' range, so a node holding a million pages sorts none of them.
fn summary_of_counts(me: u16, epoch: u32, budget: usize, pages: usize, counts: &[u32; AGE_LEVELS]) -> Summary {
    let free = budget.saturating_sub(pages).min(u32::MAX as usize) as u32;
    let mut s = Summary::new(me, epoch, pages.min(u32::MAX as usize) as u32, free);
    for (age, &n) in counts.iter().enumerate().rev() {
        if n > 0 && s.add_pages(age as u32, n).is_err() {
            break;
        }
    }
    s
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
    /// The global LRU's coordinator: the lowest live member.
    pub fn lru_coordinator(&self) -> Option<u16> {
        self.members().ids().iter().copied().min()
    }

    /// This node's age summary for `epoch` at LRU clock `tick`: the held pages counted by
    /// (quantized) age, no sort and no scratch memory. A held table of more than
    /// [`SUMMARY_SLOTS`] slots is sampled: the pages in that many slots from a place that
    /// moves with the epoch, their counts scaled up to every held page (a window in which a
    /// sparse table holds no page gives no ages: the node reports its pages and free frames
    /// only). An epoch then costs
    /// the same however much the node holds (a whole pass over a 4 GiB node's table took
    /// milliseconds every epoch, which a lender spent not serving getpages, and the kernel
    /// spends under its core lock).
    pub fn lru_summary(&self, tick: u64, epoch: u32) -> Summary {
        let mut counts = [0u32; AGE_LEVELS];
        let mut seen = 0u32;
        let pages = self.held_count();
        let from = ((mix64(u64::from(epoch)) as u128 * self.held.capacity() as u128) >> 64) as usize;
        // Once every held page is counted the rest of the window is empty slots: a node
        // holding few pages (none, idle) stops there instead of walking them all.
        for (_, h) in self.held.window(from, SUMMARY_SLOTS).take(pages) {
            counts[quantize_age(tick.saturating_sub(h.last_access)) as usize] += 1;
            seen += 1;
        }
        if (seen as usize) < pages && seen > 0 {
            for c in counts.iter_mut() {
                *c = (u64::from(*c) * pages as u64 / u64::from(seen)).min(u64::from(u32::MAX)) as u32;
            }
        }
        summary_of_counts(self.id(), epoch, self.budget(), pages, &counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    fn drain(l: &mut Lru) -> Vec<LruSend> {
        core::iter::from_fn(|| l.take_send()).collect()
    }

    #[test]
    fn summaries_group_the_oldest_ages() {
        let ages: Vec<u32> = (0..100).map(|i| (i % 20) as u32).collect();
        let s = build_summary(3, 9, 150, &ages);
        assert_eq!((s.node(), s.epoch(), s.pages(), s.free_frames()), (3, 9, 100, 50));
        assert_eq!(s.groups().len(), LRU_GROUPS);
        assert_eq!(s.groups()[0].age, 19);
        assert!(s.groups().iter().all(|g| g.count == 5));
    }

    #[test]
    fn a_plan_made_by_the_coordinator_reaches_the_members() {
        let members = [0u16, 1, 2];
        let mut lrus: Vec<Lru> = (0..3).map(|i| Lru::new(i, LruConfig::default())).collect();
        // Node 1 holds 10 old pages, node 2 has 30 free frames, node 0 lends nothing.
        let summary = |me: u16, e: u32| match me {
            1 => build_summary(1, e, 10, &[40; 10]),
            2 => build_summary(2, e, 30, &[]),
            _ => build_summary(0, e, 0, &[]),
        };
        lrus[0].poll(0, &members, |e| summary(0, e));
        let starts = drain(&mut lrus[0]);
        assert_eq!(starts.len(), 2);
        for s in starts {
            let m = LruMsg { src: 0, op: s.op, len: s.len, body: pad(&s.body) };
            let d = s.dst as usize;
            lrus[d].handle(1, &m, |e| summary(s.dst, e));
            for r in drain(&mut lrus[d]) {
                assert_eq!((r.dst, r.op), (0, OP_LRU_SUMMARY));
                lrus[0].handle(2, &LruMsg { src: s.dst, op: r.op, len: r.len, body: pad(&r.body) }, |e| summary(0, e));
            }
        }
        lrus[0].poll(3, &members, |e| summary(0, e));
        let plans = drain(&mut lrus[0]);
        assert_eq!(plans.len(), 2);
        for p in plans {
            lrus[p.dst as usize]
                .handle(4, &LruMsg { src: 0, op: p.op, len: p.len, body: pad(&p.body) }, |e| summary(p.dst, e));
        }
        // M = 256 > 40 known pages: the 30 free frames and the 10 pages.
        let plan = *lrus[0].plan().unwrap();
        assert_eq!(&plan.weights()[..3], &[0, 10, 30]);
        assert_eq!(lrus[1].plan().unwrap().weights(), plan.weights());
        // Node 0's targets follow the weights: about 3 of 4 puts go to node 2.
        let mut to = [0u32; 3];
        for _ in 0..40 {
            to[lrus[0].choose_target(Some(0), |_| true).unwrap() as usize] += 1;
        }
        assert_eq!(to, [0, 10, 30], "the whole budget is drawn exactly");
        // Budget used up: still drawn by the whole weights (never node 0, weight 0).
        let mut more = [0u32; 3];
        for _ in 0..400 {
            more[lrus[0].choose_target(Some(0), |_| true).unwrap() as usize] += 1;
        }
        assert_eq!(more[0], 0);
        assert!(more[2] > 2 * more[1] && more[1] > 50, "{more:?}");
        assert_eq!(lrus[0].choose_target(Some(0), |n| n == 0), None, "no usable member");
    }

    fn pad(b: &[u8; 100]) -> [u8; 104] {
        let mut o = [0u8; 104];
        o[..100].copy_from_slice(b);
        o
    }

    /// A node of `held` pages, page `i` last touched `age(i)` ticks before tick 10,000.
    fn holding(held: usize, age: impl Fn(usize) -> u64) -> GmsNode<u32, NoHost, netrpc::storage::Heap, 4, 4, 4, 4> {
        use crate::prelude::*;
        let mut n = GmsNode::with_capacity(1, GmsConfig::default(), NoHost, held, 16).expect("memory");
        for i in 0..held {
            let h = Held {
                frame: i as u32,
                len: 8192,
                version: Version(1),
                dirty: false,
                last_access: 10_000 - age(i),
                state: HeldState::Registered,
                seq: 1,
                repair: false,
                answer: None,
            };
            n.held.insert(PageId::new(1, i as u64), h).expect("room");
        }
        n
    }

    struct NoHost;
    impl crate::node::Host<u32> for NoHost {
        fn copy_payload(&mut self, _: &u32, _: &u32, _: u32) -> bool {
            false
        }
        fn release(&mut self, _: u32) {}
        fn dropped(&mut self, _: crate::page::PageId, _: u32, _: bool) {}
    }

    #[test]
    fn a_small_node_summarises_every_page() {
        let age = |i: usize| (i % 50) as u64;
        let n = holding(1000, age);
        let ages: Vec<u32> = (0..1000).map(|i| quantize_age(age(i))).collect();
        assert_eq!(n.lru_summary(10_000, 3), build_summary(1, 3, n.budget(), &ages));
    }

    #[test]
    fn a_large_node_samples_its_pages_in_proportion() {
        // 10 % of the pages 4,000 ticks old, 30 % 300, 60 % 2: three groups.
        let age = |i: usize| match i % 10 {
            0 => 4000,
            1..=3 => 300,
            _ => 2,
        };
        let held = 8 * SUMMARY_SLOTS;
        let n = holding(held, age);
        for epoch in [1, 2, 77] {
            let s = n.lru_summary(10_000, epoch);
            assert_eq!(s.pages() as usize, held);
            let g = s.groups();
            assert_eq!(g.iter().map(|g| g.age).collect::<Vec<_>>(), [4000, 300, 2].map(quantize_age));
            for (g, share) in g.iter().zip([0.1, 0.3, 0.6]) {
                let want = share * held as f64;
                assert!((g.count as f64 - want).abs() < 0.05 * want, "epoch {epoch}: {} pages for {want}", g.count);
            }
        }
    }
}
