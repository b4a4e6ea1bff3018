// SPDX-License-Identifier: GPL-2.0-only
//! Node faults: crash, detection (declared failed at the survivors), restart as a new
//! incarnation that rejoins, false suspicion (a live node declared failed, then heard
//! again), and the partitions the network applies.

use super::world::FState;
use super::{gms_config, history, make_node, NodeRpc, Sim, MOVING_SPACE};
use gms::prelude::*;

impl Sim {
    pub fn crash(&mut self, node: u16) {
        if self.trace {
            eprintln!("t={} CRASH {node}", self.clock.now());
        }
        self.crashed[node as usize] = true;
        self.cov.crashes += 1;
        self.hist.push(self.clock.now(), self.step, history::Ev::Crash(node));
    }

    /// The survivors learn that `node` failed: every member that is up and not suspected
    /// itself drops it from its view.
    pub fn declare_failed(&mut self, node: u16) {
        if self.trace {
            eprintln!("t={} node {node} declared failed", self.clock.now());
        }
        self.failed[node as usize] = true;
        self.view_changed = true;
        self.hist.push(self.clock.now(), self.step, history::Ev::Declared(node));
        for n in self.members_up() {
            if n == node {
                continue;
            }
            let i = n as usize;
            self.nodes[i].node_failed(self.clock.now(), &mut self.rpcs[i], node);
            self.settle_node(n);
        }
        self.record_view();
    }

    /// The nodes that are up and in the group: not crashed, not (falsely) declared failed.
    pub fn members_up(&self) -> Vec<u16> {
        self.live().into_iter().filter(|&n| !self.failed[n as usize]).collect()
    }

    /// False suspicion: the others declare `node` failed while it is up. It keeps running
    /// with its state (its copies, its directory, its operations) and its old view, and
    /// keeps sending; the others no longer count it a member. It learns the view again
    /// when [`Self::heard_again`].
    pub fn suspect(&mut self, node: u16) {
        let i = node as usize;
        assert!(!self.crashed[i] && !self.failed[i], "{}: suspicion of node {node}, which is down", self.ctx);
        self.suspicions += 1;
        self.hist.push(self.clock.now(), self.step, history::Ev::Suspect(node));
        self.declare_failed(node);
    }

    /// A node falsely declared failed is heard again: the others add it back, and it takes
    /// their view, keeping its state.
    pub fn heard_again(&mut self, node: u16) {
        let i = node as usize;
        assert!(!self.crashed[i] && self.failed[i], "{}: node {node} was not suspected", self.ctx);
        if self.trace {
            eprintln!("t={} node {node} heard again", self.clock.now());
        }
        self.failed[i] = false;
        self.hist.push(self.clock.now(), self.step, history::Ev::HeardAgain(node));
        self.rejoin(node);
    }

    /// The members add `node`, and `node` takes their view.
    fn rejoin(&mut self, node: u16) {
        let others: Vec<u16> = self.members_up().into_iter().filter(|&n| n != node).collect();
        for &n in &others {
            let j = n as usize;
            self.nodes[j].join(self.clock.now(), &mut self.rpcs[j], node).unwrap();
            self.settle_node(n);
        }
        let (view, ids) = match others.first() {
            Some(&n) => {
                let m = self.nodes[n as usize].members();
                (m.view(), m.ids().to_vec())
            }
            None => (1, vec![node]),
        };
        let i = node as usize;
        self.nodes[i].set_members(self.clock.now(), &mut self.rpcs[i], view, &ids).unwrap();
        self.settle_node(node);
        self.record_view();
    }

    /// The member set the members that are up agree on, into the history.
    fn record_view(&mut self) {
        if let Some(&n) = self.members_up().first() {
            let ids = self.nodes[n as usize].members().ids().to_vec();
            self.hist.push(self.clock.now(), self.step, history::Ev::View(ids));
        }
    }

    /// A crashed node that was declared failed starts again, empty, as a new incarnation
    /// (fresh GMS state, a fresh NetRPC with a new secret, its NIC's IPT cleared, its
    /// frames gone) and rejoins: the others add it, and it takes their view. Messages its
    /// old incarnation sent, or that were sent to it, may still be in the network.
    pub fn restart(&mut self, node: u16) {
        let i = node as usize;
        assert!(self.crashed[i] && self.failed[i], "{}: restart of node {node}, which is up", self.ctx);
        if self.trace {
            eprintln!("t={} RESTART {node}", self.clock.now());
        }
        {
            let mut w = self.w.borrow_mut();
            for info in w.frames.values_mut() {
                if info.node == node {
                    info.state = FState::Freed;
                }
            }
            w.ipt[i].clear();
        }
        self.to_free.retain(|(n, _)| *n != node);
        self.ops.retain(|(n, _), _| *n != node);
        self.order.retain(|(n, _)| *n != node);
        self.local_drops.retain(|(n, _)| *n != node);
        self.known.retain(|(n, _), _| *n != node);
        self.getpages.retain(|(n, _), _| *n != node);
        self.hist.forget(node);
        self.incarnation[i] += 1;
        let cfg = gms_config(&self.k);
        self.nodes[i] = make_node(node, cfg, &self.w);
        let rpc_cfg = netrpc::rpc::Config { call_timeout: 1 << 40, nonblocking_timeout: None };
        self.rpcs[i] = NodeRpc::new(node, rpc_cfg);
        self.rpcs[i].set_secret([self.seed ^ self.incarnation[i], u64::from(node) << 32 | self.incarnation[i]]);
        let moving = Policy { reads: ReadPolicy::Moving, writes: WritePolicy::WriteBack };
        self.nodes[i].set_policy(MOVING_SPACE, moving).unwrap();
        self.crashed[i] = false;
        self.failed[i] = false;
        self.hist.push(self.clock.now(), self.step, history::Ev::Restart(node));
        self.rejoin(node);
    }

    /// Cut the network: `side[n]` is node n's side.
    pub fn partition(&mut self, side: Vec<u8>) {
        if self.trace {
            eprintln!("t={} PARTITION {side:?}", self.clock.now());
        }
        self.hist.push(self.clock.now(), self.step, history::Ev::Partition(side.clone()));
        self.net.partition(side);
    }

    pub fn heal(&mut self) {
        if self.net.heal() {
            if self.trace {
                eprintln!("t={} HEAL", self.clock.now());
            }
            self.hist.push(self.clock.now(), self.step, history::Ev::Heal);
        }
    }
}
