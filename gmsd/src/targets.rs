// SPDX-License-Identifier: GPL-2.0-only
//! Where `gmsd` sends putpages: `gms::placement` (the policy the kernel's `/dev/gms0` and
//! the user-space ports use), fed with this daemon's members, window and heartbeats.
//!
//! A target takes at most `window / members` of this daemon's puts at once (every peer's
//! putpages share a target's 32-entry NIC receive ring, and a full ring holds the link
//! back). Targets are drawn from the epoch-based global LRU's plan among those that did not refuse a put
//! within [`gms::placement::REFUSED_NS`] and have room left as far as their heartbeats
//! tell (budget − held, less the puts sent there since); a draw of a target at its cap
//! waits for its slot rather than go elsewhere; before the first plan, or when the plan
//! draws no such target, the least loaded is taken.

use gms::epochs::{Lru, LRU_NODES};
use gms::placement::{Outcome, Placement};
use gms::prelude::PutResult;
use std::time::Instant;

/// This daemon's putpage targets.
pub struct Targets {
    placement: Placement<LRU_NODES>,
    /// The origin of the placement's clock (ns).
    epoch: Instant,
}

impl Default for Targets {
    fn default() -> Self {
        Targets { placement: Placement::new(u32::MAX), epoch: Instant::now() }
    }
}

impl Targets {
    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// The target of the next putpage among `members` (this node excluded) but not in
    /// `avoid` (the holders of the page's other replicas), counted in flight; `None` while
    /// the target it must go to is at its cap (a put in flight will finish). Counted in
    /// `lru.stats` (`puts_by_plan`, `puts_fallback`).
    pub fn pick(
        &mut self,
        lru: &mut Lru,
        coordinator: Option<u16>,
        members: &[u16],
        window: usize,
        now: Instant,
        avoid: &[u16],
    ) -> Option<u16> {
        if !self.placement.targets().eq(members.iter().copied()) {
            self.placement.set_targets(members.iter().copied());
        }
        self.placement.set_cap(u32::try_from(window / members.len().max(1)).unwrap_or(u32::MAX));
        let ns = self.ns(now);
        self.placement.pick_avoiding(ns, lru, coordinator, avoid).map(|(t, _)| t)
    }

    /// A heartbeat from `node`: it holds `held` pages of its `budget`.
    pub fn heard(&mut self, node: u16, held: u32, budget: u32) {
        self.placement.heard(node, u64::from(budget.saturating_sub(held)));
    }

    /// A put to `target` ended with `r` (or, `None`, was never sent). Whether another
    /// target takes puts (after a refusal: whether to put the page elsewhere).
    pub fn done(&mut self, target: u16, r: Option<&PutResult>, now: Instant) -> bool {
        let outcome = match r {
            Some(PutResult::Stored { .. }) => Outcome::Stored,
            Some(PutResult::Refused) => Outcome::Refused,
            _ => Outcome::Failed,
        };
        let ns = self.ns(now);
        self.placement.done(target, outcome, ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gms::epochs::LruConfig;

    /// The daemon's window sets the cap; heartbeats set the room; picks and results keep
    /// the placement's count of puts in flight.
    #[test]
    fn window_heartbeats_and_results_reach_the_placement() {
        let mut t = Targets::default();
        let mut lru = Lru::new(0, LruConfig::default());
        let now = Instant::now();
        let m = [1, 2];
        let mut picks = Vec::new();
        while let Some(n) = t.pick(&mut lru, Some(0), &m, 4, now, &[]) {
            picks.push(n);
        }
        assert_eq!(picks, [1, 2, 1, 2], "window 4 over two targets: two each, the least loaded first");
        assert_eq!((lru.stats.puts_by_plan, lru.stats.puts_fallback), (0, 4));
        assert!(t.done(2, Some(&PutResult::Stored { target: 2 }), now));
        assert_eq!(t.pick(&mut lru, Some(0), &m, 4, now, &[]), Some(2));
        // Node 2 is full by its heartbeat and node 1 refused: no target is fresh.
        t.heard(2, 100, 100);
        assert!(!t.done(1, Some(&PutResult::Refused), now));
        // A put never sent gives its slot back.
        assert!(!t.done(2, None, now));
        assert!(t.pick(&mut lru, Some(0), &m, 4, now, &[]).is_some());
        // A replica avoids the node holding another: only node 1 is left.
        let mut t = Targets::default();
        for _ in 0..2 {
            assert_eq!(t.pick(&mut lru, Some(0), &m, 4, now, &[2]), Some(1));
        }
        assert_eq!(t.pick(&mut lru, Some(0), &m, 4, now, &[2]), None, "node 1 at its cap; node 2 avoided");
    }
}
