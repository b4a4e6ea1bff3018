// SPDX-License-Identifier: GPL-2.0-only
//! The virtual clock: simulated time, in the ticks the protocol cores take as `now`.
//!
//! Nothing sleeps. A driver either steps the clock by a chosen amount ([`Clock::advance`])
//! or lets it jump to the earliest deadline among the protocol cores' `poll_timeout()`s
//! and the network's next arrival ([`Clock::jump`]), bounded so that a run with no
//! deadline still moves on. Time never goes back.

/// Simulated time. Starts at 1: 0 is left free for "never" in the cores' deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    now: u64,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

impl Clock {
    pub const fn new() -> Clock {
        Clock { now: 1 }
    }

    pub const fn now(&self) -> u64 {
        self.now
    }

    /// Move on by `dt` ticks.
    pub fn advance(&mut self, dt: u64) -> u64 {
        self.now += dt;
        self.now
    }

    /// Move to the earliest of `deadlines` (the `poll_timeout()`s of every core and of the
    /// network; `None`: nothing pending), but no further than `bound` ticks from now. A
    /// deadline already due keeps the clock where it is: the driver handles it at `now`.
    /// Returns the new time.
    pub fn jump(&mut self, deadlines: impl IntoIterator<Item = Option<u64>>, bound: u64) -> u64 {
        let limit = self.now.saturating_add(bound);
        let next = deadlines.into_iter().flatten().min().map_or(limit, |d| d.min(limit));
        self.now = self.now.max(next);
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_to_the_earliest_deadline_within_the_bound() {
        let mut c = Clock::new();
        assert_eq!(c.advance(9), 10);
        assert_eq!(c.jump([Some(50), None, Some(30)], 100), 30);
        assert_eq!(c.jump([Some(500)], 100), 130, "bounded");
        assert_eq!(c.jump([None, None], 5), 135, "nothing pending: the bound");
        assert_eq!(c.jump([Some(20)], 100), 135, "an overdue deadline: time stays");
        assert_eq!(c.now(), 135);
    }
}
