// SPDX-License-Identifier: GPL-2.0-only
//! After every input to a node: its transmits go into the network (their payloads checked
//! against what the frames hold), its completions are checked against the model and
//! recorded in the history, and the frames the runtime may free are freed.

use super::world::{gathered_payload, FState};
use super::{history, Body, Frame, OpKind, Sim, PAGE_LEN};
use gms::ops::{GetStatus, OP_GETPAGE, OP_GETPAGES};
use gms::prelude::*;
use netrpc::wire::{Header, Kind};

impl Sim {
    // ---- after every input: drain a node's outputs -------------------------------------

    /// Run `drive`, drain transmits, process completions, free what the runtime may.
    pub fn settle_node(&mut self, node: u16) {
        if self.crashed[node as usize] {
            return;
        }
        let i = node as usize;
        self.nodes[i].drive(self.clock.now(), &mut self.rpcs[i]);
        self.drain(node);
    }

    pub fn drain(&mut self, node: u16) {
        let ctx = self.ctx.clone();
        let i = node as usize;
        while let Some(t) = self.rpcs[i].poll_transmit() {
            let gathered = t.payload.and_then(|(g, len)| gathered_payload(&self.w.borrow(), node, g, len, t.ctrl()));
            if let (Some(pieces), Some((g, _))) = (&gathered, t.payload) {
                // The gather frame is the runtime's: freed once its send is done.
                self.gathered.insert(t.ctrl().to_vec(), pieces.clone());
                self.to_free.push((node, g));
            }
            let payload = t.payload.map(|(f, len)| {
                if let Some(pieces) = &gathered {
                    return (pieces[0], len);
                }
                let w = self.w.borrow();
                let info = w.frames.get(&f).unwrap_or_else(|| panic!("{ctx}: transmit of unknown frame {f}"));
                assert_eq!(info.node, node, "{ctx}: node {node} sent frame {f} of node {}", info.node);
                assert!(info.state != FState::Freed, "{ctx}: node {node} sent freed frame {f}");
                let c = info.contents.unwrap_or_else(|| panic!("{ctx}: node {node} sent empty frame {f}"));
                assert_eq!(len, PAGE_LEN, "{ctx}: payload length");
                (c, len)
            });
            let (h, body) = Header::parse(t.ctrl()).unwrap_or_else(|e| panic!("{ctx}: bad ctrl from {node}: {e:?}"));
            if let Some(((page, v), _)) = payload {
                // A page payload goes with a getpage hit or a put, and the body names it.
                if h.op == OP_GETPAGES {
                    assert!(gathered.is_some(), "{ctx}: a GETPAGES payload from one frame, not gathered");
                } else if h.op == OP_GETPAGE {
                    let rep: gms::ops::GetReply = netrpc::wire::Message::decode(body).unwrap();
                    assert_eq!((rep.status, rep.page, rep.version.0), (GetStatus::Hit, page, v), "{ctx}: hit payload");
                    assert_eq!(h.kind, Kind::Reply);
                } else {
                    let req: gms::ops::PutReq = netrpc::wire::Message::decode(body).unwrap();
                    assert_eq!((req.page, req.version.0), (page, v), "{ctx}: put payload");
                    assert_eq!(h.kind, Kind::OneWay);
                }
            }
            let body = Body { ctrl: t.ctrl().to_vec(), payload, tag: t.tag };
            self.net.send(&mut self.rng, self.clock.now(), node, t.dst, body);
        }
        // Sends are done: the runtime frees what GMS dropped and the put sources.
        {
            let mut w = self.w.borrow_mut();
            for f in std::mem::take(&mut w.dropped) {
                w.frame(f).state = FState::Freed;
            }
            for (n, f) in std::mem::take(&mut self.to_free) {
                w.free(n, f);
            }
        }
        // Waiters take finished wait-mode operations at once.
        while let Some(op) = self.nodes[i].poll_event() {
            let done = self.nodes[i].take(op).unwrap_or_else(|| panic!("{ctx}: event for {op:?} without a result"));
            assert!(self.nodes[i].take(op).is_none(), "{ctx}: taken twice");
            self.w.borrow_mut().completions.push((node, done));
        }
        let done: Vec<(u16, Completion<Frame>)> = std::mem::take(&mut self.w.borrow_mut().completions);
        for (n, c) in done {
            self.complete(n, c);
        }
    }

    // ---- completions against the model ------------------------------------------------------

    pub fn complete(&mut self, node: u16, c: Completion<Frame>) {
        let ctx = self.ctx.clone();
        if self.trace {
            eprintln!("t={} node {node}: done {:?} {:?} {:?}", self.clock.now(), c.op, c.page, c.result);
        }
        let key = (node, c.op);
        if self.client == Some(node) && !self.ops.contains_key(&key) {
            self.client_done.push(c);
            return;
        }
        if self.getpages.contains_key(&key) {
            return self.complete_getpages(node, c);
        }
        // This simulator issues no `TOPVERSION` (only a store's load does).
        if let OpResult::Top(_) = c.result {
            panic!("{ctx}: a TOPVERSION completed that nobody asked: {c:?}");
        }
        let rec = self.ops.get(&key).cloned().unwrap_or_else(|| panic!("{ctx}: completion of unknown op {key:?}"));
        assert!(rec.result.is_none(), "{ctx}: op {key:?} ({rec:?}) completed twice: {c:?}");
        assert_eq!(c.page, rec.page, "{ctx}: op {key:?}");
        let page = rec.page;
        let outcome = match c.result {
            OpResult::Get(GetResult::Hit { version, frame, held, .. }) => {
                let data = self.w.borrow().frames.get(&frame).and_then(|i| i.contents);
                history::Outcome::Hit { version: version.0, data, held }
            }
            OpResult::Get(GetResult::Miss { reason, .. }) => history::Outcome::Miss(reason),
            OpResult::Put(PutResult::Stored { .. }) => history::Outcome::Stored,
            OpResult::Put(r) => history::Outcome::NotStored(r),
            OpResult::Discard(r) => history::Outcome::Discard(r),
            OpResult::Top(_) => return,
        };
        self.hist.end(self.clock.now(), self.step, node, c.op, outcome);
        let learnt = match c.result {
            OpResult::Get(GetResult::Hit { version, .. }) => version.0,
            OpResult::Put(PutResult::Stored { .. }) => rec.version,
            OpResult::Discard(DiscardResult::Done) => rec.version + 1,
            _ => 0,
        };
        let k = self.known.entry((node, page)).or_insert(0);
        *k = (*k).max(learnt);
        let strict = self.strict;
        match (rec.kind, c.result) {
            (OpKind::Get, OpResult::Get(GetResult::Hit { version, frame, len, via, held })) => {
                let v = version.0;
                {
                    let w = self.w.borrow();
                    let info = w.frames[&frame];
                    if strict {
                        assert_eq!(
                            info.contents,
                            Some((page, v)),
                            "{ctx}: getpage {rec:?} got the wrong data: {info:?}"
                        );
                    }
                    assert_eq!((info.node, info.state), (node, FState::Live), "{ctx}: getpage frame {info:?}");
                }
                assert!(v >= rec.version, "{ctx}: STALE: getpage {rec:?} returned version {v}, older than it knew");
                assert!(
                    !strict || self.view_changed || v >= rec.floor_at_issue,
                    "{ctx}: STALE: getpage {rec:?} returned version {v}, a newer one was stored before it was issued"
                );
                assert!(
                    !strict || v <= self.issued.get(&page).copied().unwrap_or(0),
                    "{ctx}: version {v} never issued"
                );
                assert_eq!(len, PAGE_LEN);
                assert_eq!(Some(frame), rec.frame, "{ctx}: getpage returned somebody else's frame");
                match via {
                    Via::TwoWay => self.cov.hits_2way += 1,
                    Via::ThreeWay => self.cov.hits_3way += 1,
                    Via::Local => self.cov.hits_local += 1,
                }
                if held {
                    self.cov.hits_moved += 1;
                    let h = self.nodes[node as usize].held(&page).copied();
                    assert_eq!(h.map(|h| (h.frame, h.version)), Some((frame, version)), "{ctx}: held hit not held");
                } else {
                    self.w.borrow_mut().free(node, frame);
                }
            }
            (OpKind::Get, OpResult::Get(GetResult::Miss { reason, frame })) => {
                match frame {
                    Some(f) => {
                        assert_eq!(Some(f), rec.frame, "{ctx}: miss returned somebody else's frame");
                        self.w.borrow_mut().free(node, f);
                    }
                    None => {
                        let st = self.w.borrow().frames[&rec.frame.unwrap()].state;
                        assert_eq!(st, FState::Freed, "{ctx}: failed getpage {rec:?}: frame not released");
                    }
                }
                match reason {
                    MissReason::NotCached => self.cov.misses += 1,
                    r => {
                        assert!(!self.faultless(), "{ctx}: no faults, yet getpage {rec:?} failed: {r:?}");
                        self.cov.failed_gets += 1;
                    }
                }
            }
            (OpKind::Put | OpKind::Move, OpResult::Put(r)) => match r {
                PutResult::Stored { target } => {
                    assert_eq!(target, rec.target, "{ctx}: stored elsewhere");
                    let f = self.floor.entry(page).or_insert(0);
                    *f = (*f).max(rec.version);
                    if rec.kind == OpKind::Move {
                        self.cov.moves_stored += 1;
                        // The sender may hold the page again only if it was handed back (a
                        // copy with a newer identity).
                        let moved = self.moved_seq.remove(&key);
                        let h = self.nodes[node as usize].held(&page).map(|h| (h.version.0, h.seq));
                        assert!(
                            h.is_none_or(|(v, seq)| v != rec.version || moved.is_some_and(|m| seq > m)),
                            "{ctx}: movepage {rec:?} stored, the sender still holds it"
                        );
                    } else {
                        self.cov.stored += 1;
                    }
                }
                PutResult::Refused | PutResult::Busy => self.cov.refused += 1,
                PutResult::Superseded => self.cov.superseded += 1,
                PutResult::WrongView | PutResult::Failed => {
                    // Without faults only the target's runtime taking the page back while
                    // it registered makes the outcome unknown.
                    let taken_back = r == PutResult::Failed && self.local_drops.contains(&(rec.target, page));
                    assert!(!self.faultless() || taken_back, "{ctx}: no faults, yet put {rec:?} ended {r:?}");
                }
            },
            (OpKind::Discard, OpResult::Discard(r)) => {
                if r == DiscardResult::Done {
                    self.cov.discards_done += 1;
                    let f = self.floor.entry(page).or_insert(0);
                    *f = (*f).max(rec.version + 1);
                } else {
                    assert!(!self.faultless(), "{ctx}: no faults, yet discard {rec:?} failed");
                }
            }
            (k, r) => panic!("{ctx}: op {key:?} of kind {k:?} completed with {r:?}"),
        }
        self.ops.get_mut(&key).unwrap().result = Some(c.result);
    }

    /// A `GETPAGES` completion: its frame comes back (or was released), a hit's pieces
    /// hold the pages named in order, each at the version asked for or newer, `version` is
    /// the oldest of them and `len` the whole payload. The runtime then frees the frame.
    fn complete_getpages(&mut self, node: u16, c: Completion<Frame>) {
        let ctx = self.ctx.clone();
        let key = (node, c.op);
        let rec = self.getpages[&key].clone();
        assert!(rec.result.is_none(), "{ctx}: getpages {key:?} completed twice: {c:?}");
        assert_eq!(c.page, rec.first, "{ctx}: getpages {key:?}");
        let OpResult::Get(r) = c.result else { panic!("{ctx}: getpages {key:?} ended {c:?}") };
        let n = rec.mask.count_ones() as usize;
        let mut data = Vec::new();
        match r {
            GetResult::Hit { version, frame, len, via, held } => {
                assert_eq!(frame, rec.frame, "{ctx}: getpages returned somebody else's frame");
                assert_eq!((via, held), (Via::TwoWay, false), "{ctx}: getpages {key:?}");
                assert_eq!(len, PAGE_LEN * n as u32, "{ctx}: getpages length");
                data = rec.pieces.iter().map(|p| self.w.borrow().frames[p].contents).collect();
                let pages = (0..64)
                    .filter(|i| rec.mask >> i & 1 == 1)
                    .map(|i| PageId::new(rec.first.space, rec.first.page + i));
                let mut oldest = u64::MAX;
                for (k, p) in pages.enumerate() {
                    let (got, v) = data[k].unwrap_or_else(|| panic!("{ctx}: getpages piece {k} empty"));
                    assert_eq!(got, p, "{ctx}: getpages piece {k}");
                    assert!(v >= rec.known[k], "{ctx}: STALE: getpages piece {k} at {v}, {rec:?}");
                    assert!(v <= self.issued.get(&p).copied().unwrap_or(0), "{ctx}: version {v} never issued");
                    oldest = oldest.min(v);
                    let k = self.known.entry((node, p)).or_insert(0);
                    *k = (*k).max(v);
                }
                assert_eq!(version.0, oldest, "{ctx}: a getpages hit's version is the oldest page's");
                assert!(data.iter().skip(n).all(|d| d.is_none()), "{ctx}: pieces past the pages written");
                self.w.borrow_mut().free(node, frame);
            }
            GetResult::Miss { frame: Some(f), .. } => {
                assert_eq!(f, rec.frame, "{ctx}: getpages miss returned somebody else's frame");
                self.w.borrow_mut().free(node, f);
            }
            GetResult::Miss { frame: None, .. } => {
                let st = self.w.borrow().frames[&rec.frame].state;
                assert_eq!(st, FState::Freed, "{ctx}: failed getpages {rec:?}: frame not released");
            }
        }
        let rec = self.getpages.get_mut(&key).unwrap();
        rec.result = Some(r);
        rec.data = data;
    }
}
