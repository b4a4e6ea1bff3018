// SPDX-License-Identifier: GPL-2.0-only
//! Where `gmsd` sends putpages: round robin with a per-target cap on puts in flight and a
//! short back-off from targets that refused.

use gms::prelude::PutResult;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Putpage targets: round robin over the other members, at most `window / members` puts
/// in flight to each (every peer's putpages share a target's 32-entry NIC receive ring,
/// and a full ring drops), skipping a member that refused for `REFUSED_BACKOFF` (unless
/// all did).
#[derive(Default)]
pub struct Targets {
    next: usize,
    /// Putpages in flight to each target.
    pub in_flight: HashMap<u16, usize>,
    refused_at: HashMap<u16, Instant>,
}

/// How long a target that refused a putpage (budget full) is skipped.
const REFUSED_BACKOFF: Duration = Duration::from_millis(200);

impl Targets {
    pub fn pick(&mut self, members: &[u16], window: usize, now: Instant) -> Option<u16> {
        let cap = (window / members.len()).max(1);
        let fresh = |n: &u16| self.refused_at.get(n).is_none_or(|t| now.duration_since(*t) > REFUSED_BACKOFF);
        let all_refused = !members.iter().any(fresh);
        for k in 0..members.len() {
            let n = members[(self.next + k) % members.len()];
            if (all_refused || fresh(&n)) && self.in_flight.get(&n).copied().unwrap_or(0) < cap {
                self.next = (self.next + k + 1) % members.len();
                return Some(n);
            }
        }
        None
    }

    pub fn done(&mut self, target: u16, r: &PutResult) {
        if let Some(n) = self.in_flight.get_mut(&target) {
            *n = n.saturating_sub(1);
        }
        match r {
            PutResult::Refused => {
                self.refused_at.insert(target, Instant::now());
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

    #[test]
    fn round_robin_under_a_cap() {
        let mut t = Targets::default();
        let now = Instant::now();
        let m = [1, 2];
        let mut picks = Vec::new();
        while let Some(n) = t.pick(&m, 4, now) {
            *t.in_flight.entry(n).or_default() += 1;
            picks.push(n);
        }
        assert_eq!(picks, vec![1, 2, 1, 2], "window 4 over two targets: two each, alternating");
        t.done(2, &PutResult::Stored { target: 2 });
        assert_eq!(t.pick(&m, 4, now), Some(2));
    }

    #[test]
    fn refusing_targets_are_skipped_for_a_while() {
        let mut t = Targets::default();
        let now = Instant::now();
        *t.in_flight.entry(1).or_default() += 1;
        t.done(1, &PutResult::Refused);
        let m = [1, 2];
        assert_eq!(t.pick(&m, 8, Instant::now()), Some(2));
        assert_eq!(t.pick(&m, 8, Instant::now()), Some(2));
        // Everyone refused: try them anyway.
        *t.in_flight.entry(2).or_default() += 1;
        t.done(2, &PutResult::Refused);
        assert!(t.pick(&m, 8, Instant::now()).is_some());
        // After the back-off, node 1 is back in the rotation.
        let later = now + REFUSED_BACKOFF + Duration::from_millis(1);
        t.refused_at.remove(&2);
        let picks: Vec<u16> = (0..2).filter_map(|_| t.pick(&m, 8, later)).collect();
        assert!(picks.contains(&1), "{picks:?}");
    }
}
