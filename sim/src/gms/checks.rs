// SPDX-License-Identifier: GPL-2.0-only
//! The cluster's invariants, checked after steps and once it settles: frames, directory
//! convergence, quiescence, and every page reading back as its directory says.

use super::world::FState;
use super::{gms_config, Sim, HELD};
use gms::prelude::*;
use std::collections::HashMap;

impl Sim {
    // ---- checks -------------------------------------------------------------------------------

    /// Every held page's frame is live, this node's, and holds that page at that version.
    pub fn check_frames(&self) {
        let ctx = &self.ctx;
        let w = self.w.borrow();
        let mut seen = HashMap::new();
        for n in self.live() {
            for (p, h) in self.nodes[n as usize].holdings() {
                let info = w.frames.get(&h.frame).unwrap_or_else(|| panic!("{ctx}: node {n} holds unknown frame"));
                assert_eq!(
                    (info.node, info.state, info.contents),
                    (n, FState::Live, Some((*p, h.version.0))),
                    "{ctx}: node {n} holds {p:?} {h:?} in frame {info:?}"
                );
                assert!(seen.insert(h.frame, *p).is_none(), "{ctx}: frame {} held twice", h.frame);
            }
            assert!(self.nodes[n as usize].held_count() <= self.k.budget, "{ctx}: node {n} over budget");
        }
    }

    pub fn pending_ops(&self) -> usize {
        let live = self.live();
        self.ops.values().filter(|r| r.result.is_none() && live.contains(&r.node)).count()
    }

    /// Deliver everything without faults and let time pass until nothing is left to do;
    /// then keep going until the scrub has walked every table twice.
    pub fn settle(&mut self) {
        self.step = usize::MAX;
        let quiet = |s: &Sim| {
            s.net.is_empty()
                && s.pending_ops() == 0
                && s.live().iter().all(|&n| s.nodes[n as usize].tasks_pending() == 0)
        };
        // A scrub step visits one live entry and one held page: two passes over the
        // largest table this workload can fill.
        let scrub_rounds = 2 * (2 * self.k.pages as usize).max(self.k.budget).max(HELD) + 4;
        let (mut rounds, mut quiet_rounds) = (0, 0);
        loop {
            // Run to a fixed point at this time.
            loop {
                while !self.net.is_empty() {
                    self.deliver(false);
                }
                for n in self.live() {
                    self.settle_node(n);
                }
                if self.net.is_empty() {
                    break;
                }
            }
            quiet_rounds = if quiet(self) { quiet_rounds + 1 } else { 0 };
            if quiet_rounds >= scrub_rounds {
                break;
            }
            rounds += 1;
            assert!(
                rounds < 20_000,
                "{}: the cluster never settles: {} ops, tasks {:?}",
                self.ctx,
                self.pending_ops(),
                self.live().iter().map(|&n| self.nodes[n as usize].tasks_pending()).collect::<Vec<_>>()
            );
            let dt = if quiet(self) { gms_config(&self.k).scrub_interval } else { self.k.op_timeout / 4 + 1 };
            self.tick(dt);
        }
    }

    /// After `settle`: every directory entry names a live node that holds that page at
    /// that version, and every held page is named by its directory (one copy per page).
    pub fn check_converged(&self) {
        let ctx = &self.ctx;
        for d in self.live() {
            let node = &self.nodes[d as usize];
            for (p, e) in node.directory().iter() {
                let Some(site) = e.site() else { continue };
                assert_eq!(node.members().directory_of(p), Some(d), "{ctx}: node {d} keeps an entry for {p:?}");
                assert!(!self.crashed[site as usize], "{ctx}: node {d} names crashed node {site} for {p:?}");
                let h = self.nodes[site as usize].held(p).copied();
                assert_eq!(
                    h.map(|h| (h.version, h.state)),
                    Some((e.version, HeldState::Registered)),
                    "{ctx}: directory {d} names node {site} for {p:?} {e:?}, which holds {h:?}"
                );
            }
        }
        for s in self.live() {
            for (p, h) in self.nodes[s as usize].holdings() {
                let d = self.nodes[s as usize].members().directory_of(p).unwrap();
                let named = self.nodes[d as usize].directory().lookup(p);
                assert_eq!(
                    named,
                    Some((s, h.version)),
                    "{ctx}: node {s} holds {p:?} {h:?}; directory {d} names {named:?}"
                );
            }
        }
    }

    /// After `settle`: no operation left, no frame leaked, no IPT entry armed.
    pub fn check_quiet(&self) {
        let ctx = &self.ctx;
        for ((n, op), r) in &self.ops {
            if !self.crashed[*n as usize] {
                assert!(r.result.is_some(), "{ctx}: op {op:?} of node {n} never completed: {r:?}");
            }
        }
        for ((n, op), r) in &self.getpages {
            if !self.crashed[*n as usize] {
                assert!(r.result.is_some(), "{ctx}: getpages {op:?} of node {n} never completed: {r:?}");
            }
        }
        let w = self.w.borrow();
        for n in self.live() {
            let i = n as usize;
            assert_eq!(self.nodes[i].ops_in_use(), 0, "{ctx}: node {n}");
            assert_eq!(self.nodes[i].tasks_pending(), 0, "{ctx}: node {n}");
            assert_eq!(self.rpcs[i].calls_in_use(), 0, "{ctx}: node {n}: NetRPC calls left");
            assert!(w.ipt[i].is_empty(), "{ctx}: node {n}: IPT entries left armed: {:?}", w.ipt[i]);
            let s = self.nodes[i].stats();
            assert_eq!(
                s.gets,
                s.hits_local + s.hits_2way + s.hits_3way + s.misses + s.get_failures,
                "{ctx}: node {n}: every getpage ends once: {s:?}"
            );
        }
        for (f, info) in &w.frames {
            if info.state == FState::Live && !self.crashed[info.node as usize] {
                let held = self.nodes[info.node as usize].holdings().any(|(_, h)| h.frame == *f);
                assert!(held, "{ctx}: frame {f} leaked: {info:?}");
            }
        }
    }

    /// After `settle`: every page reads back as the directory says (a hit of exactly the
    /// named version, or a miss), from a random live node.
    pub fn read_back(&mut self) {
        let ctx = self.ctx.clone();
        for p in 0..2 * self.k.pages {
            let page = PageId::new(p % 2, p / 2);
            let live = self.live();
            let Some(r) = self.pick(&live) else { return };
            let d = self.nodes[r as usize].members().directory_of(&page).unwrap();
            let known = self.known.get(&(r, page)).copied().unwrap_or(0);
            let named = self.nodes[d as usize].directory().lookup(&page).filter(|&(_, v)| v.0 >= known);
            let Some(op) = self.getpage(r, page) else { panic!("{ctx}: read-back getpage refused") };
            self.run_to_idle();
            let res = self.ops[&(r, op)].result.unwrap_or_else(|| panic!("{ctx}: read-back of {page:?} hangs"));
            match (named, res) {
                (Some((_, v)), OpResult::Get(GetResult::Hit { version, .. })) => {
                    assert_eq!(version, v, "{ctx}: {page:?}")
                }
                (None, OpResult::Get(GetResult::Miss { reason: MissReason::NotCached, .. })) => {}
                (n, r) => panic!("{ctx}: read-back of {page:?} named {n:?} gave {r:?}"),
            }
        }
        self.settle();
    }

    /// Deliver and drive until no message is left, without letting time pass.
    pub fn run_to_idle(&mut self) {
        loop {
            self.run_net();
            for n in self.live() {
                self.settle_node(n);
            }
            if self.net.is_empty() {
                break;
            }
        }
    }

    pub fn gather_stats(&mut self) {
        for n in 0..self.n() {
            let s = self.nodes[n].stats();
            self.cov.dir_rejects += s.dir_rejects;
            self.cov.pages_dropped += s.pages_dropped;
            self.cov.scrub_removed += s.scrub_removed;
            self.cov.op_timeouts += s.op_timeouts;
        }
    }
}
