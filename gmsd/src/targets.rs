// SPDX-License-Identifier: GPL-2.0-only
//! Where `gmsd` sends putpages: drawn from the epoch-based global LRU's plan
//! ([`gms::epochs::Lru::choose_target`], as the kernel's `/dev/gms0` does) among the
//! targets that are safe to use now — under a per-target cap on puts in flight, not
//! refusing lately, and with free room left as far as their heartbeats tell — and round
//! robin over those before the first plan (or when none of them has weight in it).

use gms::epochs::Lru;
use gms::prelude::PutResult;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Putpage targets. A target takes at most `window / members` of this daemon's puts at
/// once (every peer's putpages share a target's 32-entry NIC receive ring, and a full ring
/// drops). A target that refused (budget full) is skipped for [`REFUSED_BACKOFF`], and one
/// whose known free room is used up is skipped until its next heartbeat — unless every
/// target is skipped, then all are tried (and refuse, if they are full).
#[derive(Default)]
pub struct Targets {
    next: usize,
    /// Putpages in flight to each target.
    in_flight: HashMap<u16, usize>,
    refused_at: HashMap<u16, Instant>,
    /// Free frames each target had at its last heartbeat, less the puts sent there since.
    room: HashMap<u16, u64>,
    /// A target drawn from the plan while it was at its cap: the next put goes there once
    /// it has a slot (a put sent elsewhere instead would undo the plan's weights).
    drawn: Option<u16>,
}

/// How long a target that refused a putpage (budget full) is skipped.
pub const REFUSED_BACKOFF: Duration = Duration::from_millis(200);

impl Targets {
    fn fresh(&self, n: u16, now: Instant) -> bool {
        let refused = self.refused_at.get(&n).is_some_and(|t| now.duration_since(*t) <= REFUSED_BACKOFF);
        !refused && self.room.get(&n).is_none_or(|&r| r > 0)
    }

    /// Whether some target other than `except` is neither refusing lately nor known to be
    /// full (a refused put goes there).
    pub fn another_takes_puts(&self, members: &[u16], except: u16, now: Instant) -> bool {
        members.iter().any(|&n| n != except && self.fresh(n, now))
    }

    /// The target of the next putpage among `members` (this node excluded), or `None`
    /// while the target it must go to is at its cap (a put in flight will finish). Drawn
    /// from `lru`'s plan (counted in its `puts_by_plan`), else round robin (counted in
    /// `puts_fallback`).
    pub fn pick(
        &mut self,
        lru: &mut Lru,
        coordinator: Option<u16>,
        members: &[u16],
        window: usize,
        now: Instant,
    ) -> Option<u16> {
        let cap = (window / members.len().max(1)).max(1);
        let any_fresh = members.iter().any(|&n| self.fresh(n, now));
        let candidates: Vec<u16> = members.iter().copied().filter(|&n| !any_fresh || self.fresh(n, now)).collect();
        let candidate = |n: u16| candidates.contains(&n);
        let in_flight = &self.in_flight;
        let has_slot = |n: u16| in_flight.get(&n).copied().unwrap_or(0) < cap;
        if let Some(t) = self.drawn {
            if candidate(t) {
                if !has_slot(t) {
                    return None;
                }
                self.drawn = None;
                return Some(t);
            }
            self.drawn = None;
        }
        if lru.plan().is_some() {
            if let Some(t) = lru.choose_target(coordinator, candidate) {
                lru.stats.puts_by_plan += 1;
                if has_slot(t) {
                    return Some(t);
                }
                self.drawn = Some(t);
                return None;
            }
        }
        let k = (0..members.len()).find(|k| {
            let n = members[(self.next + k) % members.len()];
            candidate(n) && has_slot(n)
        })?;
        let n = members[(self.next + k) % members.len()];
        self.next = (self.next + k + 1) % members.len();
        lru.stats.puts_fallback += 1;
        Some(n)
    }

    /// A putpage was sent to `target`.
    pub fn sent(&mut self, target: u16) {
        *self.in_flight.entry(target).or_default() += 1;
        if let Some(r) = self.room.get_mut(&target) {
            *r = r.saturating_sub(1);
        }
    }

    /// A heartbeat from `node`: it holds `held` pages of its `budget`.
    pub fn heard(&mut self, node: u16, held: u32, budget: u32) {
        self.room.insert(node, budget.saturating_sub(held) as u64);
    }

    pub fn done(&mut self, target: u16, r: &PutResult, now: Instant) {
        if let Some(n) = self.in_flight.get_mut(&target) {
            *n = n.saturating_sub(1);
        }
        match r {
            PutResult::Refused => {
                self.refused_at.insert(target, now);
            }
            PutResult::Stored { .. } => {
                self.refused_at.remove(&target);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gms::epochs::{build_summary, LruConfig, LruMsg, LruSend};
    use gms::lru::{OP_LRU_PLAN, OP_LRU_SUMMARY};

    fn no_plan() -> Lru {
        Lru::new(0, LruConfig::default())
    }

    /// Node 0's LRU, coordinator of nodes 0..3, with a plan made from summaries that
    /// give each node `free[n]` free frames (and no pages).
    fn with_plan(free: [usize; 3]) -> Lru {
        let members = [0u16, 1, 2];
        let mut lru = Lru::new(0, LruConfig::default());
        let summary = |me: u16, e: u32| build_summary(me, e, free[me as usize], &mut []);
        lru.poll(0, &members, |e| summary(0, e));
        let starts: Vec<LruSend> = std::iter::from_fn(|| lru.take_send()).collect();
        assert_eq!(starts.len(), 2);
        for s in starts {
            let epoch = u32::from_le_bytes(s.body[..4].try_into().unwrap());
            let mut body = [0u8; 104];
            let len = summary(s.dst, epoch).encode(&mut body).unwrap();
            lru.handle(1, &LruMsg { src: s.dst, op: OP_LRU_SUMMARY, len, body }, |e| summary(0, e));
        }
        lru.poll(2, &members, |e| summary(0, e));
        assert!(std::iter::from_fn(|| lru.take_send()).all(|p| p.op == OP_LRU_PLAN));
        lru
    }

    #[test]
    fn round_robin_under_a_cap_before_any_plan() {
        let mut t = Targets::default();
        let mut lru = no_plan();
        let now = Instant::now();
        let m = [1, 2];
        let mut picks = Vec::new();
        while let Some(n) = t.pick(&mut lru, Some(0), &m, 4, now) {
            t.sent(n);
            picks.push(n);
        }
        assert_eq!(picks, vec![1, 2, 1, 2], "window 4 over two targets: two each, alternating");
        assert_eq!((lru.stats.puts_by_plan, lru.stats.puts_fallback), (0, 4));
        t.done(2, &PutResult::Stored { target: 2 }, now);
        assert_eq!(t.pick(&mut lru, Some(0), &m, 4, now), Some(2));
    }

    #[test]
    fn refusing_and_full_targets_are_skipped_for_a_while() {
        let mut t = Targets::default();
        let mut lru = no_plan();
        let now = Instant::now();
        let m = [1, 2];
        t.sent(1);
        t.done(1, &PutResult::Refused, now);
        assert!(t.another_takes_puts(&m, 1, now) && !t.another_takes_puts(&m, 2, now));
        assert_eq!(t.pick(&mut lru, None, &m, 8, now), Some(2));
        assert_eq!(t.pick(&mut lru, None, &m, 8, now), Some(2));
        // Node 2's heartbeat says it is full: every target is skipped, so all are tried.
        t.heard(2, 100, 100);
        assert!(!t.another_takes_puts(&m, 1, now));
        let picks: Vec<u16> = (0..2).filter_map(|_| t.pick(&mut lru, None, &m, 8, now)).collect();
        assert_eq!(picks.len(), 2);
        // After the back-off node 1 takes puts again; node 2 waits for a heartbeat with room.
        let later = now + REFUSED_BACKOFF + Duration::from_millis(1);
        assert!((0..4).all(|_| t.pick(&mut lru, None, &m, 8, later) == Some(1)));
        t.heard(2, 99, 100);
        let picks: Vec<u16> = (0..2).filter_map(|_| t.pick(&mut lru, None, &m, 8, later)).collect();
        assert!(picks.contains(&2), "{picks:?}");
        t.sent(2);
        assert!(!t.fresh(2, later), "the one free frame went to the put just sent");
    }

    #[test]
    fn puts_follow_the_plan_and_wait_for_a_busy_target() {
        // Node 1 has three times node 2's free frames: weights 3:1 (node 0 has none).
        let mut lru = with_plan([0, 300, 100]);
        assert_eq!(&lru.plan().unwrap().weights()[..3], &[0, 192, 64]);
        let mut t = Targets::default();
        let now = Instant::now();
        let m = [1, 2];
        let mut to = [0u32; 3];
        for _ in 0..4000 {
            let n = t.pick(&mut lru, Some(0), &m, 8, now).expect("a target with a slot");
            t.sent(n);
            t.done(n, &PutResult::Stored { target: n }, now);
            to[n as usize] += 1;
        }
        assert_eq!((lru.stats.puts_by_plan, lru.stats.puts_fallback), (4000, 0));
        let ratio = to[1] as f64 / to[2] as f64;
        assert!((2.6..3.4).contains(&ratio), "3:1 expected, got {to:?}");
        // Node 1 at its cap (8 / 2): a draw of node 1 waits rather than go to node 2.
        for _ in 0..4 {
            t.sent(1);
        }
        let picks: Vec<Option<u16>> = (0..20).map(|_| t.pick(&mut lru, Some(0), &m, 8, now)).collect();
        let first_wait = picks.iter().position(|p| p.is_none()).expect("a draw of the busy node 1 waits");
        assert!(picks[first_wait..].iter().all(|p| p.is_none()), "and nothing overtakes it: {picks:?}");
        for p in picks.iter().flatten() {
            assert_eq!(*p, 2);
            t.sent(2);
            t.done(2, &PutResult::Stored { target: 2 }, now);
        }
        t.done(1, &PutResult::Stored { target: 1 }, now);
        assert_eq!(t.pick(&mut lru, Some(0), &m, 8, now), Some(1), "the waiting draw goes first");
        // A target whose heartbeat shows no room is not drawn while another has room.
        t.heard(1, 400, 400);
        assert!((0..50).all(|_| {
            let n = t.pick(&mut lru, Some(0), &m, 8, now);
            if let Some(n) = n {
                t.sent(n);
                t.done(n, &PutResult::Stored { target: n }, now);
            }
            n == Some(2)
        }));
    }
}
