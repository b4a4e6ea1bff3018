// SPDX-License-Identifier: GPL-2.0-only
//! A simulated cluster for the GMS tests: 3–5 nodes, each a NetRPC `Rpc` and a
//! `GmsNode`, over a network that can drop, duplicate and reorder messages and be cut
//! into two sides (a partition, until healed); nodes may crash, be declared failed some
//! steps later, and restart as a new incarnation that rejoins. Every operation and fault
//! goes into a [`history::History`] for the history checker.
//!
//! Frames are numbers; a frame's contents are modelled as the (page, version) written
//! into it, so every payload can be checked. The NIC's incoming payload table is modelled
//! per node (token → armed frame, one shot; an unarmed token refuses the payload); an
//! untagged payload lands in a fresh receive buffer. The harness plays every runtime: it
//! frees a frame when GMS drops it (after the transmits drained, i.e. after the sends it
//! may be attached to), frees putpage sources after their send, and frees getpage frames
//! after checking them.
//!
//! `GETPAGES` (issued by a test, recorded in [`Sim::getpages`]): a host's gather frame ([`Host::gather`]) names the held
//! frames it sends as one payload, their contents read when the reply is drained, and is
//! freed after that send; the requester's group frame owns as many page-sized pieces,
//! armed under one IPT token, and the payload's pages land in them in order (more pages
//! than pieces: the NIC refuses it). Freeing a group frame frees its pieces.
//!
//! The model beside it: per page, the versions ever issued and the *floor* — the newest
//! version a completed putpage/movepage stored, or one past a completed discard. A
//! getpage must return the page's own data at a version ≥ the floor when it was issued,
//! or a miss.

#![allow(dead_code)]

pub mod history;

use gms::ops::{GetPagesReply, GetStatus, OP_GETPAGE, OP_GETPAGES, OP_MOVEPAGE, OP_PUTPAGE};
use gms::prelude::*;
use netrpc::prelude::*;
use netrpc::storage::Heap;
use netrpc::wire::{Header, Kind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub type Frame = u32;
pub const PAGE_LEN: u32 = 8192;
pub const HELD: usize = 16;
pub const DIR: usize = 64;
pub const OPS: usize = 8;
pub const TASKS: usize = 16;
pub const CALLS: usize = 32;
pub type Node = GmsNode<Frame, TestHost, Heap, 8, OPS, TASKS, 16>;

/// A node of this simulation: `HELD` pages (more if its budget is larger), `DIR` directory
/// entries.
fn make_node(id: u16, cfg: GmsConfig, w: &Rc<RefCell<World>>) -> Node {
    let held = cfg.budget.max(HELD);
    GmsNode::with_capacity(id, cfg, TestHost { id, w: w.clone() }, held, DIR).expect("memory for a test node")
}
pub type Net = Rpc<Node, Frame, CALLS, 2, 64>;

/// Spaces: 0 sticky reads, 1 moving reads.
pub const MOVING_SPACE: u64 = 1;

// ---- a small deterministic PRNG (splitmix64) ----------------------------------------------

#[derive(Clone)]
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn pct(&mut self, p: u32) -> bool {
        self.below(100) < p as u64
    }
}

// ---- scenario -------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    pub nodes: usize,
    pub pages: u64,
    pub drop_pct: u32,
    pub dup_pct: u32,
    pub reorder: bool,
    /// (node, crash step, steps until the others declare it failed)
    pub crash: Option<(u16, usize, usize)>,
    pub op_timeout: u64,
    pub max_dt: u64,
    pub budget: usize,
}

impl Knobs {
    /// `nodes` nodes on a network that loses, duplicates and reorders nothing, no crash,
    /// 8 pages, operations timing out after 1000 ticks, clock steps up to 10.
    pub fn quiet(nodes: usize, budget: usize) -> Knobs {
        Knobs {
            nodes,
            pages: 8,
            drop_pct: 0,
            dup_pct: 0,
            reorder: false,
            crash: None,
            op_timeout: 1000,
            max_dt: 10,
            budget,
        }
    }

    pub fn faultless(&self) -> bool {
        self.drop_pct == 0 && self.dup_pct == 0 && self.crash.is_none() && self.op_timeout >= 1 << 39
    }
}

// ---- the world the runtimes share -----------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FState {
    Live,
    /// GMS dropped it: freed once the transmits it may be attached to are drained.
    Dropped,
    Freed,
}

#[derive(Clone, Copy, Debug)]
pub struct FrameInfo {
    pub node: u16,
    pub contents: Option<(PageId, u64)>,
    pub state: FState,
}

pub struct World {
    pub ctx: String,
    pub frames: HashMap<Frame, FrameInfo>,
    pub next_frame: Frame,
    pub ipt: Vec<HashMap<u64, Frame>>,
    pub completions: Vec<(u16, Completion<Frame>)>,
    /// Frames GMS dropped since the last drain.
    pub dropped: Vec<Frame>,
    pub trace: bool,
    /// Gather frames a host made: the frames each names, in order.
    pub gathers: HashMap<Frame, Vec<Frame>>,
    /// Group frames a requester made: the page-sized pieces each owns, in order.
    pub groups: HashMap<Frame, Vec<Frame>>,
    /// Nodes whose host does not gather (as `Host::gather`'s default: `None`).
    pub no_gather: std::collections::HashSet<u16>,
}

impl World {
    pub fn alloc(&mut self, node: u16, contents: Option<(PageId, u64)>) -> Frame {
        self.next_frame += 1;
        self.frames.insert(self.next_frame, FrameInfo { node, contents, state: FState::Live });
        self.next_frame
    }

    pub fn frame(&mut self, f: Frame) -> &mut FrameInfo {
        let ctx = &self.ctx;
        self.frames.get_mut(&f).unwrap_or_else(|| panic!("{ctx}: unknown frame {f}"))
    }

    /// The runtime frees a frame of `node` (disarming its IPT entry).
    pub fn free(&mut self, node: u16, f: Frame) {
        let ctx = self.ctx.clone();
        let info = self.frame(f);
        assert_eq!((info.node, info.state), (node, FState::Live), "{ctx}: free of frame {f}: {info:?}");
        info.state = FState::Freed;
        self.ipt[node as usize].retain(|_, fr| *fr != f);
        // A group frame owns its pieces.
        if let Some(pieces) = self.groups.remove(&f) {
            for p in pieces {
                self.free(node, p);
            }
        }
    }

    /// A group frame of `node` over `pieces` fresh empty page-sized frames.
    pub fn group(&mut self, node: u16, pieces: usize) -> Frame {
        let list = (0..pieces).map(|_| self.alloc(node, None)).collect();
        let g = self.alloc(node, None);
        self.groups.insert(g, list);
        g
    }
}

pub struct TestHost {
    pub id: u16,
    pub w: Rc<RefCell<World>>,
}

impl Host<Frame> for TestHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        let mut w = self.w.borrow_mut();
        let ctx = w.ctx.clone();
        let src = *w.frame(*from);
        let dst = w.frame(*to);
        assert_eq!((src.node, src.state), (self.id, FState::Live), "{ctx}: copy from frame {from}");
        assert_eq!((dst.node, dst.state), (self.id, FState::Live), "{ctx}: copy into frame {to}");
        assert_eq!(len, PAGE_LEN, "{ctx}: copy length");
        dst.contents = src.contents;
        true
    }
    fn release(&mut self, frame: Frame) {
        let mut w = self.w.borrow_mut();
        if w.trace {
            eprintln!("  node {}: release frame {frame}", self.id);
        }
        w.free(self.id, frame);
    }
    fn dropped(&mut self, page: PageId, frame: Frame, _dirty: bool) {
        let mut w = self.w.borrow_mut();
        if w.trace {
            eprintln!("  node {}: dropped {page:?} frame {frame}", self.id);
        }
        let ctx = w.ctx.clone();
        let info = w.frame(frame);
        assert_eq!((info.node, info.state), (self.id, FState::Live), "{ctx}: GMS dropped frame {frame}: {info:?}");
        assert_eq!(info.contents.map(|c| c.0), Some(page), "{ctx}: GMS dropped frame {frame} as page {page:?}");
        info.state = FState::Dropped;
        w.dropped.push(frame);
    }
    fn completed(&mut self, done: Completion<Frame>) {
        self.w.borrow_mut().completions.push((self.id, done));
    }
    fn gather(&mut self, frames: &[Frame], _piece: u32) -> Option<Frame> {
        let mut w = self.w.borrow_mut();
        if w.no_gather.contains(&self.id) {
            return None;
        }
        let ctx = w.ctx.clone();
        for f in frames {
            let info = *w.frame(*f);
            assert_eq!((info.node, info.state), (self.id, FState::Live), "{ctx}: gather of frame {f}");
            assert!(info.contents.is_some(), "{ctx}: gather of empty frame {f}");
        }
        let g = w.alloc(self.id, None);
        w.gathers.insert(g, frames.to_vec());
        Some(g)
    }
}

/// The pages a `GETPAGES` reply's gather frame `g` carries, read from the frames it names
/// as the NIC sends them; checked against the reply's body (a hit naming each page at its
/// version, in the mask's order) and its length. `None`: `g` is no gather frame.
fn gathered_payload(w: &World, node: u16, g: Frame, len: u32, ctrl: &[u8]) -> Option<Vec<(PageId, u64)>> {
    let ctx = &w.ctx;
    let list = w.gathers.get(&g)?;
    let contents: Vec<(PageId, u64)> = list
        .iter()
        .map(|f| {
            let info = w.frames.get(f).unwrap_or_else(|| panic!("{ctx}: gather of unknown frame {f}"));
            assert_eq!(info.node, node, "{ctx}: node {node} gathered frame {f} of node {}", info.node);
            assert!(info.state != FState::Freed, "{ctx}: node {node} sent freed frame {f} in a gather");
            info.contents.unwrap_or_else(|| panic!("{ctx}: node {node} gathered empty frame {f}"))
        })
        .collect();
    let (h, body) = Header::parse(ctrl).unwrap_or_else(|e| panic!("{ctx}: bad ctrl from {node}: {e:?}"));
    assert_eq!((h.op, h.kind), (OP_GETPAGES, Kind::Reply), "{ctx}: a gather frame goes with a GETPAGES reply");
    let rep: GetPagesReply = netrpc::wire::Message::decode(body).unwrap();
    assert_eq!(rep.status, GetStatus::Hit, "{ctx}: pages sent with a miss");
    let pages: Vec<PageId> =
        (0..64).filter(|i| rep.mask >> i & 1 == 1).map(|i| PageId::new(rep.first.space, rep.first.page + i)).collect();
    let named: Vec<(PageId, u64)> = pages.iter().enumerate().map(|(k, p)| (*p, rep.versions.get(k).0)).collect();
    assert_eq!(contents, named, "{ctx}: the gathered pages are not the ones the reply names");
    assert_eq!(len, PAGE_LEN * list.len() as u32, "{ctx}: gathered payload length");
    Some(contents)
}

/// A `GETPAGES` a test issued and how it ended.
#[derive(Clone, Debug)]
pub struct PagesRec {
    pub first: PageId,
    pub mask: u64,
    /// The version the requester knew of each page (the oldest it takes).
    pub known: Vec<u64>,
    /// The group frame, and its pieces.
    pub frame: Frame,
    pub pieces: Vec<Frame>,
    pub result: Option<GetResult<Frame>>,
    /// On a hit, what each piece held when the operation completed.
    pub data: Vec<Option<(PageId, u64)>>,
}

// ---- the network ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Msg {
    pub src: u16,
    pub dst: u16,
    pub ctrl: Vec<u8>,
    /// (contents, length)
    pub payload: Option<((PageId, u64), u32)>,
    pub tag: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Put,
    Move,
    Discard,
}

#[derive(Clone, Debug)]
pub struct OpRec {
    pub node: u16,
    pub kind: OpKind,
    pub page: PageId,
    pub version: u64,
    pub floor_at_issue: u64,
    pub frame: Option<Frame>,
    pub target: u16,
    pub result: Option<OpResult<Frame>>,
}

/// How often the interesting paths were taken.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cov {
    pub dropped: u64,
    pub duplicated: u64,
    pub to_crashed: u64,
    pub ipt_refused: u64,
    pub hits_2way: u64,
    pub hits_3way: u64,
    pub hits_local: u64,
    pub hits_moved: u64,
    pub misses: u64,
    pub failed_gets: u64,
    pub stored: u64,
    pub refused: u64,
    pub superseded: u64,
    pub moves_stored: u64,
    pub discards_done: u64,
    pub dir_rejects: u64,
    pub pages_dropped: u64,
    pub scrub_removed: u64,
    pub op_timeouts: u64,
    pub crashes: u64,
}

pub struct Sim {
    pub k: Knobs,
    pub seed: u64,
    pub ctx: String,
    pub rng: Rng,
    pub now: u64,
    pub step: usize,
    pub w: Rc<RefCell<World>>,
    pub nodes: Vec<Node>,
    pub rpcs: Vec<Net>,
    pub net: Vec<Msg>,
    pub crashed: Vec<bool>,
    /// Declared failed at the survivors.
    pub failed: Vec<bool>,
    pub ops: HashMap<(u16, OpId), OpRec>,
    pub order: Vec<(u16, OpId)>,
    pub floor: HashMap<PageId, u64>,
    /// What each node's runtime knows of a page (its own acknowledged writes and
    /// discards, its own reads), as a block device knows the versions it wrote: its reads
    /// take no older version. Forgotten on a restart.
    pub known: HashMap<(u16, PageId), u64>,
    pub issued: HashMap<PageId, u64>,
    pub next_token: u64,
    /// Runtime frames to free once the transmits are drained (putpage sources).
    pub to_free: Vec<(u16, Frame)>,
    pub cov: Cov,
    /// `GMS_TRACE=1`: print every action, message and completion.
    pub trace: bool,
    /// (node, page) the runtime took back with `drop_local`.
    pub local_drops: std::collections::HashSet<(u16, PageId)>,
    /// Movepages in flight: the identity of the copy each moved.
    pub moved_seq: HashMap<(u16, OpId), u64>,
    /// Everything issued and how it ended, and every fault (`history::check` judges it).
    pub hist: history::History,
    /// Check every getpage's data and version as it completes (`false`: leave that to
    /// the history checker, which reports instead of panicking).
    pub strict: bool,
    /// The membership changed at least once (a page's directory may have moved: a copy
    /// superseded while the old directory's word to drop it died may be named again, and
    /// read by a node that did not know the newer version).
    pub view_changed: bool,
    /// A partition: each node's side (messages between sides are lost), if any.
    pub cut: Option<Vec<u8>>,
    /// Messages a partition dropped.
    pub cut_drops: u64,
    /// Starts of each node (a restart is a new incarnation).
    pub incarnation: Vec<u64>,
    /// The pages each `GETPAGES` reply in flight carries, by its control bytes.
    pub gathered: HashMap<Vec<u8>, Vec<(PageId, u64)>>,
    /// `GETPAGES` operations, recorded by the test that issued them.
    pub getpages: HashMap<(u16, OpId), PagesRec>,
    /// A node whose operations a client core issues (the store checker's writer): their
    /// completions go to `client_done` for it, not to this model.
    pub client: Option<u16>,
    pub client_done: Vec<Completion<Frame>>,
}

pub fn gms_config(k: &Knobs) -> GmsConfig {
    GmsConfig {
        op_timeout: k.op_timeout,
        task_timeout: (k.op_timeout / 2).max(10),
        retry_delay: 20,
        max_attempts: 0,
        tombstone_ttl: u64::MAX / 4,
        budget: k.budget,
        scrub_interval: 40,
    }
}

impl Sim {
    pub fn new(seed: u64, k: Knobs) -> Sim {
        let ctx = format!("seed {seed:#x} {k:?}");
        let n = k.nodes;
        let w = Rc::new(RefCell::new(World {
            ctx: ctx.clone(),
            frames: HashMap::new(),
            next_frame: 0,
            ipt: vec![HashMap::new(); n],
            completions: Vec::new(),
            dropped: Vec::new(),
            trace: std::env::var("GMS_TRACE").is_ok_and(|v| v == "1"),
            gathers: HashMap::new(),
            groups: HashMap::new(),
            no_gather: Default::default(),
        }));
        let cfg = gms_config(&k);
        let rpc_cfg = netrpc::rpc::Config { call_timeout: 1 << 40, nonblocking_timeout: None };
        let mut sim = Sim {
            k,
            seed,
            ctx,
            rng: Rng(seed),
            now: 1,
            step: 0,
            nodes: (0..n as u16).map(|id| make_node(id, cfg, &w)).collect(),
            rpcs: (0..n as u16).map(|id| Net::new(id, rpc_cfg)).collect(),
            w,
            net: Vec::new(),
            crashed: vec![false; n],
            failed: vec![false; n],
            ops: HashMap::new(),
            order: Vec::new(),
            floor: HashMap::new(),
            known: HashMap::new(),
            issued: HashMap::new(),
            next_token: 0x100,
            to_free: Vec::new(),
            cov: Cov::default(),
            trace: std::env::var("GMS_TRACE").is_ok_and(|v| v == "1"),
            local_drops: Default::default(),
            moved_seq: Default::default(),
            hist: Default::default(),
            strict: true,
            view_changed: false,
            cut: None,
            cut_drops: 0,
            incarnation: vec![1; n],
            gathered: HashMap::new(),
            getpages: HashMap::new(),
            client: None,
            client_done: Vec::new(),
        };
        let ids: Vec<u16> = (0..n as u16).collect();
        for i in 0..n {
            let moving = Policy { reads: ReadPolicy::Moving, writes: WritePolicy::WriteBack };
            sim.nodes[i].set_policy(MOVING_SPACE, moving).unwrap();
            sim.nodes[i].set_members(sim.now, &mut sim.rpcs[i], 1, &ids).unwrap();
        }
        sim.hist.push(sim.now, 0, history::Ev::View(ids));
        sim
    }

    /// No drops, duplicates, partitions or crashes so far (reordering allowed).
    pub fn faultless(&self) -> bool {
        self.k.faultless() && self.cov.crashes == 0 && self.cut_drops == 0
    }

    pub fn n(&self) -> usize {
        self.k.nodes
    }
    pub fn live(&self) -> Vec<u16> {
        (0..self.n() as u16).filter(|&i| !self.crashed[i as usize]).collect()
    }
    pub fn page(&mut self) -> PageId {
        let p = self.rng.below(2 * self.k.pages);
        PageId::new(p % 2, p / 2)
    }
    fn pick(&mut self, from: &[u16]) -> Option<u16> {
        (!from.is_empty()).then(|| from[self.rng.below(from.len() as u64) as usize])
    }

    // ---- after every input: drain a node's outputs -------------------------------------

    /// Run `drive`, drain transmits, process completions, free what the runtime may.
    pub fn settle_node(&mut self, node: u16) {
        if self.crashed[node as usize] {
            return;
        }
        let i = node as usize;
        self.nodes[i].drive(self.now, &mut self.rpcs[i]);
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
            self.net.push(Msg { src: node, dst: t.dst, ctrl: t.ctrl().to_vec(), payload, tag: t.tag });
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
            eprintln!("t={} node {node}: done {:?} {:?} {:?}", self.now, c.op, c.page, c.result);
        }
        let key = (node, c.op);
        if self.client == Some(node) && !self.ops.contains_key(&key) {
            self.client_done.push(c);
            return;
        }
        if self.getpages.contains_key(&key) {
            return self.complete_getpages(node, c);
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
        };
        self.hist.end(self.now, self.step, node, c.op, outcome);
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
                PutResult::Refused => self.cov.refused += 1,
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

    // ---- client actions ---------------------------------------------------------------------

    fn record(&mut self, node: u16, op: OpId, rec: OpRec) {
        let ctx = &self.ctx;
        if self.trace {
            eprintln!("t={} node {node}: issue {op:?} {rec:?}", self.now);
        }
        self.hist.issue(self.now, self.step, node, op, rec.kind, rec.page, rec.version, rec.target);
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
        let (now, rpc, known) = (self.now, &mut self.rpcs[i], Version(known));
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
                assert!(
                    matches!(e, GmsError::OpsFull | GmsError::Busy | GmsError::Rpc(RpcError::TxFull)),
                    "{}: issue failed: {e:?}",
                    self.ctx
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
        let r =
            self.nodes[i].putpage(self.now, &mut self.rpcs[i], page, Version(v), frame, PAGE_LEN, target, false, mode);
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
        let r = self.nodes[i].movepage(self.now, &mut self.rpcs[i], page, target, mode);
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
        let r = self.nodes[i].discard(self.now, &mut self.rpcs[i], page, Version(v), mode);
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
        let r = self.nodes[node as usize].hold(self.now, page, Version(v), frame, PAGE_LEN, false);
        if self.trace {
            eprintln!("t={} node {node}: hold {page:?} v{v}: {r:?}", self.now);
        }
        if r.is_err() {
            self.w.borrow_mut().free(node, frame);
        } else {
            self.hist.push(self.now, self.step, history::Ev::Hold { node, page, version: v });
        }
        self.settle_node(node);
    }

    /// The runtime takes a held page back (aged out).
    pub fn drop_local(&mut self, node: u16, page: PageId) {
        if self.trace {
            eprintln!("t={} node {node}: drop_local {page:?}", self.now);
        }
        self.local_drops.insert((node, page));
        self.hist.push(self.now, self.step, history::Ev::DropLocal { node, page });
        if let Some(h) = self.nodes[node as usize].drop_local(self.now, &page) {
            let info = self.w.borrow().frames[&h.frame];
            assert_eq!(info.contents, Some((page, h.version.0)), "{}: drop_local frame", self.ctx);
            self.w.borrow_mut().free(node, h.frame);
        }
        self.settle_node(node);
    }

    // ---- network and time ---------------------------------------------------------------------

    pub fn deliver(&mut self, faults: bool) {
        if self.net.is_empty() {
            return;
        }
        let i = if self.k.reorder { self.rng.below(self.net.len() as u64) as usize } else { 0 };
        let msg = if faults && self.rng.pct(self.k.dup_pct) {
            self.cov.duplicated += 1;
            let (h, body) = Header::parse(&self.net[i].ctrl).unwrap();
            if h.op == OP_PUTPAGE || h.op == OP_MOVEPAGE {
                let req: gms::ops::PutReq = netrpc::wire::Message::decode(body).unwrap();
                self.hist.duplicated(self.net[i].src, req.tag);
            }
            self.net[i].clone()
        } else {
            self.net.remove(i)
        };
        if faults && self.rng.pct(self.k.drop_pct) {
            self.cov.dropped += 1;
            return;
        }
        let dst = msg.dst;
        if self.cut.as_ref().is_some_and(|side| side[msg.src as usize] != side[dst as usize]) {
            self.cut_drops += 1;
            return;
        }
        if self.crashed[dst as usize] {
            self.cov.to_crashed += 1;
            return;
        }
        let payload = match msg.payload {
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
        };
        if self.trace {
            let (h, body) = Header::parse(&msg.ctrl).unwrap();
            eprintln!(
                "t={} {} -> {}: {:?} op {:#x} hops {} tok {}/{} body {:02x?} payload {:?} {payload:?}",
                self.now, msg.src, dst, h.kind, h.op, h.hops, h.token.origin, h.token.record, body, msg.payload
            );
        }
        let d = dst as usize;
        self.rpcs[d].handle_message(self.now, &mut self.nodes[d], msg.src, &msg.ctrl, payload);
        self.settle_node(dst);
    }

    /// Deliver every message (no faults, no time passing).
    pub fn run_net(&mut self) {
        while !self.net.is_empty() {
            self.deliver(false);
        }
    }

    /// The result of an operation, once completed.
    pub fn result(&self, node: u16, op: OpId) -> Option<OpResult<Frame>> {
        self.ops.get(&(node, op)).and_then(|r| r.result)
    }

    /// A page of `space` whose directory node is `dir` (in node 0's view).
    pub fn page_with_dir(&self, space: u64, dir: u16, skip: usize) -> PageId {
        (0..)
            .map(|i| PageId::new(space, i))
            .filter(|p| self.nodes[0].members().directory_of(p) == Some(dir))
            .nth(skip)
            .unwrap()
    }

    pub fn tick(&mut self, dt: u64) {
        self.now += dt;
        for n in self.live() {
            let i = n as usize;
            self.rpcs[i].handle_timeouts(self.now, &mut self.nodes[i]);
            self.settle_node(n);
        }
    }

    pub fn crash(&mut self, node: u16) {
        if self.trace {
            eprintln!("t={} CRASH {node}", self.now);
        }
        self.crashed[node as usize] = true;
        self.cov.crashes += 1;
        self.hist.push(self.now, self.step, history::Ev::Crash(node));
    }

    /// The survivors learn that `node` failed.
    pub fn declare_failed(&mut self, node: u16) {
        if self.trace {
            eprintln!("t={} node {node} declared failed", self.now);
        }
        self.failed[node as usize] = true;
        self.view_changed = true;
        self.hist.push(self.now, self.step, history::Ev::Declared(node));
        for n in self.live() {
            let i = n as usize;
            self.nodes[i].node_failed(self.now, &mut self.rpcs[i], node);
            self.settle_node(n);
        }
        self.record_view();
    }

    /// The member set the live nodes agree on, into the history.
    fn record_view(&mut self) {
        if let Some(&n) = self.live().first() {
            let ids = self.nodes[n as usize].members().ids().to_vec();
            self.hist.push(self.now, self.step, history::Ev::View(ids));
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
            eprintln!("t={} RESTART {node}", self.now);
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
        self.rpcs[i] = Net::new(node, rpc_cfg);
        self.rpcs[i].set_secret([self.seed ^ self.incarnation[i], u64::from(node) << 32 | self.incarnation[i]]);
        let moving = Policy { reads: ReadPolicy::Moving, writes: WritePolicy::WriteBack };
        self.nodes[i].set_policy(MOVING_SPACE, moving).unwrap();
        self.crashed[i] = false;
        self.failed[i] = false;
        self.hist.push(self.now, self.step, history::Ev::Restart(node));
        let others: Vec<u16> = self.live().into_iter().filter(|&n| n != node).collect();
        for &n in &others {
            let j = n as usize;
            self.nodes[j].join(self.now, &mut self.rpcs[j], node).unwrap();
            self.settle_node(n);
        }
        let (view, ids) = match others.first() {
            Some(&n) => {
                let m = self.nodes[n as usize].members();
                (m.view(), m.ids().to_vec())
            }
            None => (1, vec![node]),
        };
        self.nodes[i].set_members(self.now, &mut self.rpcs[i], view, &ids).unwrap();
        self.settle_node(node);
        self.record_view();
    }

    /// Cut the network: `side[n]` is node n's side.
    pub fn partition(&mut self, side: Vec<u8>) {
        if self.trace {
            eprintln!("t={} PARTITION {side:?}", self.now);
        }
        self.hist.push(self.now, self.step, history::Ev::Partition(side.clone()));
        self.cut = Some(side);
    }

    pub fn heal(&mut self) {
        if self.cut.take().is_some() {
            if self.trace {
                eprintln!("t={} HEAL", self.now);
            }
            self.hist.push(self.now, self.step, history::Ev::Heal);
        }
    }

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
