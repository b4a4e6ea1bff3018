// SPDX-License-Identifier: GPL-2.0-only
//! Where a putpage goes: the global LRU's plan ([`crate::epochs::Lru::choose_target`])
//! drawn over the targets that take puts now, else the least loaded of them. One policy
//! for every runtime (the kernel's `/dev/gms0`, `gmsd`, the user-space ports). No heap,
//! no `unsafe`.
//!
//! A target is *fresh* unless it refused a put lately (its budget was full: skipped for
//! [`REFUSED_NS`], or until the next plan, which reflects free memory anew) or its free
//! room, as last heard ([`Placement::heard`], e.g. from its heartbeat) less the puts sent
//! since, is used up. A fresh target takes a put while it has fewer than `cap` in flight
//! (several nodes' putpages converge on a target's NIC receive ring, and a full ring holds
//! the link back). A plan draw of a fresh target at its cap is held: the next pick goes there once
//! it has a slot (`None` until then), as sending that put elsewhere would undo the plan's
//! weights. When no target is fresh the least loaded under its cap is chosen anyway, so a
//! caller that must put somewhere still can; [`Placement::done`] tells a caller whose put
//! was refused whether another target is worth trying.
//!
//! ```
//! use gms::epochs::{Lru, LruConfig};
//! use gms::placement::{Outcome, Placement, Via};
//!
//! let mut lru = Lru::new(0, LruConfig::default());
//! let mut p = Placement::<4>::new(u32::MAX);
//! p.set_targets([1, 2]);
//! // No plan yet: the least loaded target, in order.
//! assert_eq!(p.pick(0, &mut lru, None), Some((1, Via::Fallback)));
//! assert!(p.done(1, Outcome::Stored, 0));
//! assert_eq!(p.pick(0, &mut lru, None), Some((2, Via::Fallback)));
//! // Node 2 is full: it is skipped for a while, and node 1 still takes puts.
//! assert!(p.done(2, Outcome::Refused, 0));
//! assert_eq!(p.pick(1, &mut lru, None), Some((1, Via::Fallback)));
//! ```

use super::epochs::Lru;

/// How long a target that refused a putpage (its budget full) is skipped (ns).
pub const REFUSED_NS: u64 = 200_000_000;

/// How a target was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Drawn from the global LRU's plan.
    Plan,
    /// The node that holds the page's copy already ([`Placement::keep`]): a rewrite
    /// replaces it in place.
    Kept,
    /// No plan, or the plan drew no usable target: the least loaded.
    Fallback,
}

/// How a put ended, for [`Placement::done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Stored,
    /// The target's budget was full.
    Refused,
    /// Timed out, or the target failed.
    Failed,
    /// The target is busy with an earlier copy of the page: it takes others.
    Busy,
}

#[derive(Clone, Copy, Debug, Default)]
struct Target {
    node: u16,
    in_flight: u32,
    /// Pages stored there by this node (with those in flight, the fallback's measure of
    /// load).
    stored: u64,
    /// Skipped until then (ns) after a refusal.
    refused_until: u64,
    /// Free room as last heard less the puts sent since (`None`: never heard).
    room: Option<u64>,
}

/// The put targets of one node (at most `M`) and their state.
#[derive(Clone, Debug)]
pub struct Placement<const M: usize> {
    targets: [Target; M],
    len: usize,
    cap: u32,
    /// The plan epoch refusals date from (a new plan forgets them).
    epoch: Option<u32>,
    /// A target the plan drew while it was at its cap: the next put goes there.
    held: Option<u16>,
}

impl<const M: usize> Placement<M> {
    /// No targets yet; at most `cap` puts in flight to each (`u32::MAX`: no cap).
    pub const fn new(cap: u32) -> Self {
        Placement {
            targets: [Target { node: 0, in_flight: 0, stored: 0, refused_until: 0, room: None }; M],
            len: 0,
            cap: if cap == 0 { 1 } else { cap },
            epoch: None,
            held: None,
        }
    }

    /// At most `cap` puts in flight to each target from now on (at least 1).
    pub fn set_cap(&mut self, cap: u32) {
        self.cap = cap.max(1);
    }

    /// Put to `nodes` from now on (the first `M`); a node that stays keeps its state.
    pub fn set_targets(&mut self, nodes: impl IntoIterator<Item = u16>) {
        let old = self.targets;
        let old = &old[..self.len];
        self.len = 0;
        for n in nodes.into_iter().take(M) {
            if self.targets[..self.len].iter().any(|t| t.node == n) {
                continue;
            }
            self.targets[self.len] =
                old.iter().find(|t| t.node == n).copied().unwrap_or(Target { node: n, ..Default::default() });
            self.len += 1;
        }
    }

    /// Stop putting to `node` (it failed).
    pub fn remove(&mut self, node: u16) {
        if let Some(i) = self.index(node) {
            self.targets.copy_within(i + 1..self.len, i);
            self.len -= 1;
        }
    }

    /// The targets, in the order given.
    pub fn targets(&self) -> impl Iterator<Item = u16> + '_ {
        self.targets[..self.len].iter().map(|t| t.node)
    }

    /// Puts in flight to `node`.
    pub fn in_flight(&self, node: u16) -> u32 {
        self.index(node).map_or(0, |i| self.targets[i].in_flight)
    }

    /// `node` has `free` pages of room (its heartbeat said so).
    pub fn heard(&mut self, node: u16, free: u64) {
        if let Some(i) = self.index(node) {
            self.targets[i].room = Some(free);
        }
    }

    /// Whether `node` is a fresh target with a slot free at `now`.
    pub fn takes_puts(&self, node: u16, now: u64) -> bool {
        self.index(node).is_some_and(|i| self.fresh(i, now) && self.has_slot(i))
    }

    /// Take `node` as the target of a putpage at `now` if it is a fresh target with a slot
    /// (counted in flight, as a pick is): the holder of the copy a rewrite replaces.
    pub fn keep(&mut self, node: u16, now: u64) -> bool {
        match self.index(node) {
            Some(i) if self.fresh(i, now) && self.has_slot(i) => {
                self.targets[i].in_flight += 1;
                true
            }
            _ => false,
        }
    }

    /// Choose the target of a putpage at `now` (and count it in flight): by `lru`'s plan
    /// over the fresh targets, else the least loaded fresh one with a slot, else (none is
    /// fresh) the least loaded with a slot. `None`: no target, all at their cap, or the
    /// plan's draw is held until its target has a slot. Counted in `lru.stats`
    /// (`puts_by_plan`, `puts_fallback`).
    pub fn pick(&mut self, now: u64, lru: &mut Lru, coordinator: Option<u16>) -> Option<(u16, Via)> {
        self.pick_avoiding(now, lru, coordinator, &[])
    }

    /// [`Self::pick`] among the targets not in `avoid` (the nodes already holding the
    /// other copies of a replicated page).
    pub fn pick_avoiding(
        &mut self,
        now: u64,
        lru: &mut Lru,
        coordinator: Option<u16>,
        avoid: &[u16],
    ) -> Option<(u16, Via)> {
        let epoch = lru.plan().map(|p| p.epoch());
        if epoch != self.epoch {
            self.epoch = epoch;
            self.targets[..self.len].iter_mut().for_each(|t| t.refused_until = 0);
        }
        let allowed = |p: &Self, i: usize| !avoid.contains(&p.targets[i].node);
        let held = match self.held.and_then(|n| self.index(n)) {
            Some(i) if allowed(self, i) => {
                self.held = None;
                Some(i).filter(|&i| self.fresh(i, now))
            }
            // A held draw this put may not take waits for the next one.
            Some(_) => None,
            None => {
                self.held = None;
                None
            }
        };
        let drawn = match held {
            Some(i) => Some(i),
            None => {
                let i = lru.choose_target(coordinator, |n| {
                    self.index(n).is_some_and(|i| self.fresh(i, now) && allowed(self, i))
                });
                if i.is_some() {
                    lru.stats.puts_by_plan += 1;
                }
                i.and_then(|n| self.index(n))
            }
        };
        let i = match drawn {
            Some(i) if self.has_slot(i) => i,
            Some(i) => {
                self.held = Some(self.targets[i].node);
                return None;
            }
            None => {
                let load = |i: usize| self.targets[i].stored + u64::from(self.targets[i].in_flight);
                let least = |ok: &dyn Fn(usize) -> bool| {
                    (0..self.len).filter(|&i| allowed(self, i) && ok(i)).min_by_key(|&i| load(i))
                };
                let i = least(&|i| self.fresh(i, now) && self.has_slot(i)).or_else(|| least(&|i| self.has_slot(i)))?;
                lru.stats.puts_fallback += 1;
                let t = &mut self.targets[i];
                t.in_flight += 1;
                t.room = t.room.map(|r| r.saturating_sub(1));
                return Some((t.node, Via::Fallback));
            }
        };
        let t = &mut self.targets[i];
        t.in_flight += 1;
        t.room = t.room.map(|r| r.saturating_sub(1));
        Some((t.node, Via::Plan))
    }

    /// A put to `node` (chosen by [`Self::pick`]) ended at `now`. Whether a target still
    /// takes puts (after a refusal: whether putting the page elsewhere is worth it).
    pub fn done(&mut self, node: u16, outcome: Outcome, now: u64) -> bool {
        if let Some(i) = self.index(node) {
            let t = &mut self.targets[i];
            t.in_flight = t.in_flight.saturating_sub(1);
            match outcome {
                Outcome::Stored => {
                    t.stored += 1;
                    t.refused_until = 0;
                }
                Outcome::Refused => t.refused_until = now.saturating_add(REFUSED_NS),
                Outcome::Failed | Outcome::Busy => {}
            }
        }
        (0..self.len).any(|i| self.fresh(i, now))
    }

    fn index(&self, node: u16) -> Option<usize> {
        self.targets[..self.len].iter().position(|t| t.node == node)
    }

    fn fresh(&self, i: usize, now: u64) -> bool {
        let t = &self.targets[i];
        t.refused_until <= now && t.room != Some(0)
    }

    fn has_slot(&self, i: usize) -> bool {
        self.targets[i].in_flight < self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_avoids_the_nodes_holding_the_other_copies() {
        let mut lru = Lru::new(0, crate::epochs::LruConfig::default());
        let mut p = Placement::<4>::new(u32::MAX);
        p.set_targets([1, 2, 3]);
        for _ in 0..20 {
            let (a, _) = p.pick(0, &mut lru, None).unwrap();
            let (b, _) = p.pick_avoiding(0, &mut lru, None, &[a]).unwrap();
            let (c, _) = p.pick_avoiding(0, &mut lru, None, &[a, b]).unwrap();
            assert!(a != b && b != c && a != c, "{a} {b} {c}");
        }
        assert_eq!(p.pick_avoiding(0, &mut lru, None, &[1, 2, 3]), None, "every target avoided");
    }

    #[test]
    fn refusals_cap_and_membership() {
        let mut lru = Lru::new(0, crate::epochs::LruConfig::default());
        let mut p = Placement::<4>::new(2);
        assert_eq!(p.pick(0, &mut lru, None), None, "no targets");
        p.set_targets([1, 2, 2, 3]);
        assert_eq!(p.targets().count(), 3, "duplicates dropped");
        // Cap 2: six picks fill every target (the least loaded, counting those in flight,
        // so they alternate), the seventh finds none.
        let mut n = [0; 4];
        for _ in 0..6 {
            n[p.pick(0, &mut lru, None).unwrap().0 as usize] += 1;
        }
        assert_eq!(n, [0, 2, 2, 2]);
        assert_eq!(p.pick(0, &mut lru, None), None);
        // All refuse: the last refusal says no target takes puts.
        assert!(p.done(1, Outcome::Refused, 10));
        assert!(p.done(2, Outcome::Refused, 10));
        assert!(!p.done(3, Outcome::Refused, 10));
        // Still one may be picked (under its cap), and after the back-off all are usable.
        assert!(p.pick(11, &mut lru, None).is_some());
        assert!(p.takes_puts(2, 10 + REFUSED_NS));
        // A node that stays keeps its in-flight count; a removed one is gone.
        let before = p.in_flight(2);
        p.set_targets([2, 3]);
        assert_eq!(p.in_flight(2), before);
        p.remove(2);
        assert!(p.targets().eq([3]));
        assert_eq!(lru.stats.puts_fallback, 7);
    }

    /// Node 0's part, coordinator of nodes 0..3, with a plan from summaries that give
    /// node `n` `free[n]` free frames (and no pages).
    fn with_plan(free: [usize; 3]) -> Lru {
        use crate::epochs::{build_summary, LruConfig, LruMsg};
        use crate::lru::{OP_LRU_PLAN, OP_LRU_SUMMARY};
        let members = [0u16, 1, 2];
        let mut lru = Lru::new(0, LruConfig::default());
        let summary = |me: u16, e: u32| build_summary(me, e, free[me as usize], &[]);
        lru.poll(0, &members, |e| summary(0, e));
        for _ in 0..2 {
            let start = lru.take_send().expect("an epoch start per peer");
            let epoch = u32::from_le_bytes(start.body[..4].try_into().unwrap());
            let mut body = [0u8; 104];
            let len = summary(start.dst, epoch).encode(&mut body).unwrap();
            lru.handle(1, &LruMsg { src: start.dst, op: OP_LRU_SUMMARY, len, body }, |e| summary(0, e));
        }
        lru.poll(2, &members, |e| summary(0, e));
        while let Some(m) = lru.take_send() {
            assert_eq!(m.op, OP_LRU_PLAN);
        }
        assert!(lru.plan().is_some());
        lru
    }

    #[test]
    fn plan_weights_held_draws_and_known_room() {
        // Node 1 has three times node 2's free frames: weights 3:1.
        let mut lru = with_plan([0, 300, 100]);
        let mut p = Placement::<4>::new(4);
        p.set_targets([1, 2]);
        let mut to = [0u32; 3];
        for _ in 0..4000 {
            let (n, via) = p.pick(0, &mut lru, Some(0)).expect("a target with a slot");
            assert_eq!(via, Via::Plan);
            p.done(n, Outcome::Stored, 0);
            to[n as usize] += 1;
        }
        let ratio = f64::from(to[1]) / f64::from(to[2]);
        assert!((2.6..3.4).contains(&ratio), "3:1 expected, got {to:?}");
        // Node 1 at its cap: a draw of it is held, and nothing overtakes it.
        let mut busy = 0;
        while busy < 4 {
            match p.pick(0, &mut lru, Some(0)) {
                Some((1, _)) => busy += 1,
                Some((n, _)) => _ = p.done(n, Outcome::Stored, 0),
                None => unreachable!("node 2 never stays busy"),
            }
        }
        let picks: [Option<(u16, Via)>; 20] = core::array::from_fn(|_| p.pick(0, &mut lru, Some(0)));
        let first = picks.iter().position(|x| x.is_none()).expect("a draw of the busy node 1 is held");
        assert!(picks[first..].iter().all(|x| x.is_none()), "{picks:?}");
        for (n, _) in picks.iter().flatten() {
            assert_eq!(*n, 2);
            p.done(2, Outcome::Stored, 0);
        }
        p.done(1, Outcome::Stored, 0);
        assert_eq!(p.pick(0, &mut lru, Some(0)).map(|x| x.0), Some(1), "the held draw goes first");
        // Node 1's heartbeat shows no room: it is not drawn while node 2 has room, and the
        // room node 2 had is spent by the puts sent there.
        p.heard(1, 0);
        p.heard(2, 3);
        let picks: [Option<(u16, Via)>; 3] = core::array::from_fn(|_| p.pick(0, &mut lru, Some(0)));
        assert!(picks.iter().all(|x| x.is_some_and(|(n, _)| n == 2)), "{picks:?}");
        assert!(!p.takes_puts(2, 0), "its room went to the puts just sent");
        // No fresh target: the least loaded with a slot is tried anyway.
        assert!(!p.done(2, Outcome::Stored, 0));
        assert!(p.pick(0, &mut lru, Some(0)).is_some_and(|(_, via)| via == Via::Fallback));
    }
}
