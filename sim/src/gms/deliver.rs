// SPDX-License-Identifier: GPL-2.0-only
//! The cluster's network and time: a message the network delivers lands in the
//! receiver's NIC (its payload in an armed frame or a fresh receive buffer) and goes to
//! its `Rpc`; a clock step runs every live node's timeouts.

use super::world::FState;
use super::{Msg, Sim};
use gms::ops::{OP_MOVEPAGE, OP_PUTPAGE};
use netrpc::prelude::*;
use netrpc::wire::Header;

use super::Frame;
use crate::net::Fate;

impl Sim {
    /// Deliver one message, if any is due: with `faults`, the network may duplicate it
    /// (the copy is delivered now, the original stays in flight) or lose it; a partition
    /// cuts it; a crashed receiver throws it away.
    pub fn deliver(&mut self, faults: bool) {
        let Some(d) = self.net.poll(&mut self.rng, self.clock.now(), faults) else { return };
        if d.duplicate {
            self.cov.duplicated += 1;
            // Each delivery of a put or move is answered: the history checker learns that
            // the answer ending it may not be the one that stored the copy.
            let (h, body) = Header::parse(&d.packet.ctrl).unwrap();
            if h.op == OP_PUTPAGE || h.op == OP_MOVEPAGE {
                let req: gms::ops::PutReq = netrpc::wire::Message::decode(body).unwrap();
                self.hist.duplicated(d.packet.src, req.tag);
            }
        }
        match d.fate {
            Fate::Lost => self.cov.dropped += 1,
            Fate::Cut => {}
            Fate::Arrives if self.crashed[d.packet.dst as usize] => self.cov.to_crashed += 1,
            Fate::Arrives => self.arrive(&d.packet),
        }
    }

    /// `msg` reaches its receiver's NIC and `Rpc`.
    fn arrive(&mut self, msg: &Msg) {
        let dst = msg.dst;
        let payload = self.land_payload(msg);
        let now = self.clock.now();
        if self.trace {
            let (h, body) = Header::parse(&msg.ctrl).unwrap();
            eprintln!(
                "t={now} {} -> {dst}: {:?} op {:#x} hops {} tok {}/{} body {body:02x?} payload {:?} {payload:?}",
                msg.src, h.kind, h.op, h.hops, h.token.origin, h.token.record, msg.payload
            );
        }
        let d = dst as usize;
        self.rpcs[d].handle_message(now, &mut self.nodes[d], msg.src, &msg.ctrl, payload);
        self.settle_node(dst);
    }

    /// Where the NIC puts `msg`'s payload: a tagged one into the frame armed under its
    /// token (one shot; unarmed, or longer than the frame: refused), an untagged one into a
    /// fresh receive buffer.
    fn land_payload(&mut self, msg: &Msg) -> InPayload<Frame> {
        let dst = msg.dst;
        match msg.payload {
            None => InPayload::None,
            Some((c, len)) if msg.tag != 0 => {
                let mut w = self.w.borrow_mut();
                // A gathered payload's pages, scattered into a group frame's pieces in order.
                let pages = self.gathered.get(&msg.ctrl).cloned().unwrap_or_else(|| vec![c]);
                match w.ipt[dst as usize].remove(&msg.tag) {
                    Some(f) if pages.len() > w.groups.get(&f).map_or(1, |g| g.len()) => {
                        // Longer than the frame armed: the NIC refuses it.
                        self.cov.ipt_refused += 1;
                        InPayload::Refused
                    }
                    Some(f) => {
                        let ctx = w.ctx.clone();
                        let info = w.frame(f);
                        assert_eq!(info.state, FState::Live, "{ctx}: IPT write into frame {f}");
                        info.contents = Some(c);
                        for (p, c) in w.groups.get(&f).cloned().unwrap_or_default().into_iter().zip(pages) {
                            w.frame(p).contents = Some(c);
                        }
                        InPayload::Ipt { token: msg.tag, len }
                    }
                    None => {
                        self.cov.ipt_refused += 1;
                        InPayload::Refused
                    }
                }
            }
            Some((c, len)) => {
                let f = self.w.borrow_mut().alloc(dst, Some(c));
                InPayload::Buffer { frame: f, len }
            }
        }
    }

    /// Deliver every message (no faults, no time passing).
    pub fn run_net(&mut self) {
        while !self.net.is_empty() {
            self.deliver(false);
        }
    }

    /// Let `dt` ticks pass: every live node handles its timeouts.
    pub fn tick(&mut self, dt: u64) {
        let now = self.clock.advance(dt);
        for n in self.live() {
            let i = n as usize;
            self.rpcs[i].handle_timeouts(now, &mut self.nodes[i]);
            self.settle_node(n);
        }
    }

    /// Let time jump to the earliest deadline of any live node's GMS or NetRPC (at most
    /// `bound` ticks), then run the timeouts due: a quiet cluster's next event, without
    /// stepping through the ticks between.
    pub fn advance(&mut self, bound: u64) {
        let live = self.live();
        let deadlines = live.iter().flat_map(|&n| {
            let i = n as usize;
            [self.nodes[i].poll_timeout(), self.rpcs[i].poll_timeout()]
        });
        self.clock.jump(deadlines, bound);
        self.tick(0);
    }
}
