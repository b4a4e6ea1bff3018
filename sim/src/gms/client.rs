// SPDX-License-Identifier: GPL-2.0-only
//! The operations a test issues at a node, as its runtime would: each is recorded for the
//! model and the history before GMS may complete it.

use super::{history, Frame, OpKind, OpRec, Sim, PAGE_LEN};
use gms::prelude::*;
use netrpc::prelude::*;

impl Sim {
    // ---- client actions ---------------------------------------------------------------------

    fn record(&mut self, node: u16, op: OpId, rec: OpRec) {
        let ctx = &self.ctx;
        if self.trace {
            eprintln!("t={} node {node}: issue {op:?} {rec:?}", self.clock.now());
        }
        self.hist.issue(self.clock.now(), self.step, node, op, rec.kind, rec.page, rec.version, rec.target);
        assert!(self.ops.insert((node, op), rec).is_none(), "{ctx}: op id {op:?} reused while live");
        self.order.push((node, op));
    }

    fn mode(&mut self) -> Mode {
        if self.rng.pct(50) {
            Mode::Wait
        } else {
            Mode::NonBlocking
        }
    }

    pub fn getpage(&mut self, node: u16, page: PageId) -> Option<OpId> {
        self.getpage_via(node, page, None)
    }

    /// A getpage sent straight to `holder` (`GmsNode::getpage_hinted`).
    pub fn getpage_hinted(&mut self, node: u16, page: PageId, holder: u16) -> Option<OpId> {
        self.getpage_via(node, page, Some(holder))
    }

    fn getpage_via(&mut self, node: u16, page: PageId, hint: Option<u16>) -> Option<OpId> {
        let frame = self.w.borrow_mut().alloc(node, None);
        self.next_token += 1 + self.rng.below(3);
        let token = self.next_token;
        self.w.borrow_mut().ipt[node as usize].insert(token, frame);
        let mode = self.mode();
        let floor = self.floor.get(&page).copied().unwrap_or(0);
        let known = self.known.get(&(node, page)).copied().unwrap_or(0);
        let i = node as usize;
        // Records first: a getpage may complete before it returns.
        // A getpage's `version`: what the reader knew, the oldest version it takes.
        let rec = OpRec {
            node,
            kind: OpKind::Get,
            page,
            version: known,
            floor_at_issue: floor,
            frame: Some(frame),
            target: 0,
            result: None,
        };
        let reply_to = ReplyTo::Solicited { token, frame };
        let (now, rpc, known) = (self.clock.now(), &mut self.rpcs[i], Version(known));
        let r = match hint {
            Some(h) => self.nodes[i].getpage_hinted(now, rpc, page, known, h, None, reply_to, mode),
            None => self.nodes[i].getpage_at_least(now, rpc, page, known, reply_to, mode),
        };
        self.after_issue(node, r, rec, Some(frame))
    }

    fn after_issue(&mut self, node: u16, r: Result<OpId, GmsError>, rec: OpRec, frame: Option<Frame>) -> Option<OpId> {
        match r {
            Ok(op) => {
                // Completions queued during the call are processed by the drain below,
                // after the record exists.
                self.record(node, op, rec);
                self.settle_node(node);
                Some(op)
            }
            Err(e) => {
                // A node falsely suspected, or one that learnt a view without it, may not
                // count the target a member.
                let stale_view = e == GmsError::BadTarget && !self.nodes[node as usize].members().contains(rec.target);
                assert!(
                    stale_view || matches!(e, GmsError::OpsFull | GmsError::Busy | GmsError::Rpc(RpcError::TxFull)),
                    "{}: node {node} (view {:?}) could not issue {rec:?}: {e:?}",
                    self.ctx,
                    self.nodes[node as usize].members().ids()
                );
                if let Some(f) = frame {
                    self.w.borrow_mut().free(node, f);
                }
                self.settle_node(node);
                None
            }
        }
    }

    pub fn putpage(&mut self, node: u16, page: PageId, target: u16) -> Option<OpId> {
        let v = {
            let e = self.issued.entry(page).or_insert(0);
            *e += 1;
            *e
        };
        let frame = self.w.borrow_mut().alloc(node, Some((page, v)));
        let mode = self.mode();
        let i = node as usize;
        let rec =
            OpRec { node, kind: OpKind::Put, page, version: v, floor_at_issue: 0, frame: None, target, result: None };
        let r = self.nodes[i].putpage(
            self.clock.now(),
            &mut self.rpcs[i],
            page,
            Version(v),
            frame,
            PAGE_LEN,
            target,
            false,
            mode,
        );
        if r.is_ok() {
            // The source frame is the runtime's: freed once its send is done.
            self.to_free.push((node, frame));
        }
        self.after_issue(node, r, rec, if r.is_ok() { None } else { Some(frame) })
    }

    pub fn movepage(&mut self, node: u16, page: PageId, target: u16) -> Option<OpId> {
        let h = *self.nodes[node as usize].held(&page)?;
        let mode = self.mode();
        let i = node as usize;
        let rec = OpRec {
            node,
            kind: OpKind::Move,
            page,
            version: h.version.0,
            floor_at_issue: 0,
            frame: None,
            target,
            result: None,
        };
        let r = self.nodes[i].movepage(self.clock.now(), &mut self.rpcs[i], page, target, mode);
        if let Ok(op) = r {
            self.moved_seq.insert((node, op), h.seq);
        }
        self.after_issue(node, r, rec, None)
    }

    pub fn discard(&mut self, node: u16, page: PageId) -> Option<OpId> {
        let v = self.issued.get(&page).copied().unwrap_or(0);
        let mode = self.mode();
        let i = node as usize;
        let rec = OpRec {
            node,
            kind: OpKind::Discard,
            page,
            version: v,
            floor_at_issue: 0,
            frame: None,
            target: 0,
            result: None,
        };
        let r = self.nodes[i].discard(self.clock.now(), &mut self.rpcs[i], page, Version(v), mode);
        self.after_issue(node, r, rec, None)
    }

    /// The runtime registers a page it read from disk (a new version).
    pub fn hold(&mut self, node: u16, page: PageId) {
        let v = {
            let e = self.issued.entry(page).or_insert(0);
            *e += 1;
            *e
        };
        let frame = self.w.borrow_mut().alloc(node, Some((page, v)));
        let r = self.nodes[node as usize].hold(self.clock.now(), page, Version(v), frame, PAGE_LEN, false);
        if self.trace {
            eprintln!("t={} node {node}: hold {page:?} v{v}: {r:?}", self.clock.now());
        }
        if r.is_err() {
            self.w.borrow_mut().free(node, frame);
        } else {
            self.hist.push(self.clock.now(), self.step, history::Ev::Hold { node, page, version: v });
        }
        self.settle_node(node);
    }

    /// The runtime takes a held page back (aged out).
    pub fn drop_local(&mut self, node: u16, page: PageId) {
        if self.trace {
            eprintln!("t={} node {node}: drop_local {page:?}", self.clock.now());
        }
        self.local_drops.insert((node, page));
        self.hist.push(self.clock.now(), self.step, history::Ev::DropLocal { node, page });
        if let Some(h) = self.nodes[node as usize].drop_local(self.clock.now(), &page) {
            let info = self.w.borrow().frames[&h.frame];
            assert_eq!(info.contents, Some((page, h.version.0)), "{}: drop_local frame", self.ctx);
            self.w.borrow_mut().free(node, h.frame);
        }
        self.settle_node(node);
    }
}
