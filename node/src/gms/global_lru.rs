// SPDX-License-Identifier: GPL-2.0-only
//! A port's part in the global LRU: its age summaries, the epoch messages, and making room for putpages.

use super::lru::LruConfig;
use super::GmsPort;
use gms::prelude::*;

impl GmsPort {
    /// The global LRU's coordinator: the lowest live member.
    pub fn coordinator(&self) -> Option<u16> {
        self.node.lru_coordinator()
    }

    /// Set the global LRU's parameters (keeps its state).
    pub fn set_lru_config(&mut self, cfg: LruConfig) {
        self.lru.cfg = cfg;
    }

    /// Global-LRU work after a poll: messages received, coordinator duties, putpages
    /// stored here, room for more, messages to send. Returns whether it sent anything.
    pub(super) fn lru_step(&mut self, now: u64) -> bool {
        let tick = self.lru.tick(now);
        let inbox = std::mem::take(&mut self.node.host.lru_inbox);
        for m in &inbox {
            let node = &self.node;
            self.lru.handle(now, m, |e| node.lru_summary(tick, e));
        }
        let node = &self.node;
        self.lru.poll(now, node.members().ids(), |e| node.lru_summary(tick, e));
        self.count_received();
        self.make_room(now);
        let mut sent = false;
        while let Some(m) = self.lru.take_send() {
            // A full transmit queue loses the message: the epoch's deadline covers it.
            sent |= self.rpc.send_oneway(m.dst, m.op, &m.body[..m.len], None).is_ok();
        }
        sent
    }

    /// Count the putpages this node stored since last time against the plan.
    fn count_received(&mut self) {
        let c = self.coordinator();
        self.lru.note_stored(self.node.stats().pages_stored, c);
    }

    /// Keep `headroom` frames of the budget free by discarding held pages at least as old
    /// as the plan's threshold (ages as of the plan), oldest first, down to twice the
    /// headroom free. A node that is full while the plan still sends it putpages (its
    /// weight is not used up) discards its oldest pages whatever their age: the puts
    /// replace them, as the plan intends. Dirty pages are skipped (kept), never discarded.
    pub(super) fn make_room(&mut self, now: u64) {
        let budget = self.node.budget();
        let headroom = self.lru.cfg.headroom;
        let held = self.node.held_count();
        if budget == 0 || held + headroom <= budget {
            return;
        }
        self.count_received();
        let Some(plan) = self.lru.plan().copied() else { return };
        let owed = plan.remaining().get(self.id() as usize).copied().unwrap_or(0) as usize;
        let full = held >= budget;
        // A scan that found too few old pages is not repeated until the next plan.
        if self.room_blocked == Some(plan.epoch()) && !(full && owed > 0) {
            return;
        }
        // Dirty pages are never candidates (`GmsNode::age_out`): kept until their writer
        // cleans them; those old enough to go are counted when room came up short.
        let mut dirty_old = 0u64;
        let mut old: Vec<(u32, PageId)> = Vec::new();
        for (p, h) in self.node.holdings().filter(|(_, h)| h.state == HeldState::Registered) {
            let age = self.lru.age_at_plan(h.last_access);
            match h.dirty {
                true => dirty_old += u64::from(age >= plan.threshold()),
                false => old.push((age, *p)),
            }
        }
        old.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
        let want = (held + 2 * headroom).saturating_sub(budget);
        let old_enough = old.iter().take_while(|a| a.0 >= plan.threshold()).count();
        let mut n = want.min(old_enough);
        if n < want {
            self.lru.stats.dirty_kept += dirty_old;
            self.room_blocked = Some(plan.epoch());
            if full && owed > 0 {
                n = want.min(owed.max(1)).min(old.len());
            }
        }
        let mut gone = 0;
        for &(_, page) in &old {
            if gone == n {
                break;
            }
            match self.node.age_out(now, &page) {
                AgeOut::Gone(h) => {
                    // Replies posted earlier may still carry the frame.
                    self.node.host.frames.retire(h.frame);
                    self.lru.stats.held_discarded += 1;
                    gone += 1;
                }
                // Dirtied since the scan (a put replaced it): kept.
                AgeOut::KeptDirty => self.lru.stats.dirty_kept += 1,
                AgeOut::Registering | AgeOut::NotHeld => {}
            }
        }
    }

    /// Pages this node discarded by the global LRU (evictions not put, held pages aged out).
    pub fn pages_discarded(&self) -> u64 {
        self.lru.stats.evictions_discarded + self.lru.stats.held_discarded
    }
}
