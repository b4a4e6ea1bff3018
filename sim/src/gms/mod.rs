// SPDX-License-Identifier: GPL-2.0-only
//! A simulated cluster for the GMS tests: 3–5 nodes, each a NetRPC `Rpc` and a
//! `GmsNode`, over the simulated network ([`crate::net`]: loss, duplicates that reach
//! NetRPC and GMS, reordering, partitions until healed) on the virtual clock; nodes may
//! crash, be declared failed some steps later, and restart as a new incarnation that
//! rejoins, or be falsely suspected (declared failed while up, keeping their state) and
//! heard again. Every operation and fault goes into a [`history::History`] for the
//! history checker. All randomness comes from [`Sim::rng`], stream 0 of the seed.
//!
//! Files: `world` (frames, the NIC's payload table, the host callbacks), `client` (the
//! operations a test issues), `drain` (a node's outputs after each input, completions
//! checked against the model), `deliver` (network and time), `faults` (crash, restart,
//! suspicion, partitions), `checks` (invariants, settling, read-back), `history` (the
//! record and its checker).
//!
//! Frames are numbers; a frame's contents are modelled as the (page, version) written
//! into it, so every payload can be checked. The NIC's incoming payload table is modelled
//! per node (token → armed frame, one shot; an unarmed token refuses the payload); an
//! untagged payload lands in a fresh receive buffer. The harness plays every runtime: it
//! frees a frame when GMS drops it (after the transmits drained, i.e. after the sends it
//! may be attached to), frees putpage sources after their send, and frees getpage frames
//! after checking them.
//!
//! `GETPAGES` (issued by a test, recorded in [`Sim::getpages`]): a host's gather frame
//! ([`Host::gather`]) names the held frames it sends as one payload, their contents read when the reply is drained, and is
//! freed after that send; the requester's group frame owns as many page-sized pieces,
//! armed under one IPT token, and the payload's pages land in them in order (more pages
//! than pieces: the NIC refuses it). Freeing a group frame frees its pieces.
//!
//! The model beside it: per page, the versions ever issued and the *floor* — the newest
//! version a completed putpage/movepage stored, or one past a completed discard. A
//! getpage must return the page's own data at a version ≥ the floor when it was issued,
//! or a miss.

mod checks;
mod client;
mod deliver;
mod drain;
mod faults;
pub mod history;
mod world;

pub use world::{FState, FrameInfo, TestHost, World};

use crate::clock::Clock;
use crate::net::{Faults, Net, Packet};
use crate::rng::Rng;
use gms::prelude::*;
use netrpc::prelude::*;
use netrpc::storage::Heap;
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
pub(crate) fn make_node(id: u16, cfg: GmsConfig, w: &Rc<RefCell<World>>) -> Node {
    let held = cfg.budget.max(HELD);
    GmsNode::with_capacity(id, cfg, TestHost { id, w: w.clone() }, held, DIR).expect("memory for a test node")
}
pub type NodeRpc = Rpc<Node, Frame, CALLS, 2, 64>;

/// Spaces: 0 sticky reads, 1 moving reads.
pub const MOVING_SPACE: u64 = 1;

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

/// What a message carries: its control bytes, its payload modelled as the (page,
/// version) it holds and its length, and the IPT token it is tagged with (0: none).
#[derive(Clone, Debug)]
pub struct Body {
    pub ctrl: Vec<u8>,
    pub payload: Option<((PageId, u64), u32)>,
    pub tag: u64,
}

/// A message in flight (its `src` and `dst`, and the [`Body`] it derefs to).
pub type Msg = Packet<Body>;

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
    pub clock: Clock,
    pub step: usize,
    pub w: Rc<RefCell<World>>,
    pub nodes: Vec<Node>,
    pub rpcs: Vec<NodeRpc>,
    pub net: Net<Body>,
    pub crashed: Vec<bool>,
    /// Declared failed at the others (crashed, or up and falsely suspected).
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
    /// False suspicions so far (live nodes declared failed).
    pub suspicions: u64,
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
        rebuild_window: k.op_timeout,
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
            rng: Rng::new(seed, 0),
            clock: Clock::new(),
            step: 0,
            nodes: (0..n as u16).map(|id| make_node(id, cfg, &w)).collect(),
            rpcs: (0..n as u16).map(|id| NodeRpc::new(id, rpc_cfg)).collect(),
            w,
            net: Net::new(Faults { loss_pct: k.drop_pct, dup_pct: k.dup_pct, reorder: k.reorder, latency: (0, 0) }),
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
            suspicions: 0,
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
            sim.nodes[i].set_members(sim.clock.now(), &mut sim.rpcs[i], 1, &ids).unwrap();
        }
        sim.hist.push(sim.clock.now(), 0, history::Ev::View(ids));
        sim
    }

    /// No drops, duplicates, partitions or crashes so far (reordering allowed).
    pub fn faultless(&self) -> bool {
        self.k.faultless() && self.cov.crashes == 0 && self.suspicions == 0 && self.net.stats().cut == 0
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
    pub(crate) fn pick(&mut self, from: &[u16]) -> Option<u16> {
        self.rng.pick(from).copied()
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
}
